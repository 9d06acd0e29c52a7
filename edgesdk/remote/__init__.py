"""Boards over SSH: ``edgesdk remote info|push|run|profile``.

Host side: ``inventory`` (targets), ``connection`` (paramiko, host keys, remote commands),
``transfer`` (SFTP with hash skip and atomic rename), ``provision`` (the SDK on the board),
``commands`` (one job per target, several targets at once) and ``cli``.
Board side: ``runner`` (``python -m edgesdk.remote.runner``), which imports only the base SDK.

Nothing here imports paramiko at package import: the board never has it, and the host loads it
only when a remote command runs.
"""
