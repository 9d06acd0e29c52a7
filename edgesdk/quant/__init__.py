"""8-bit quantization: fixed-point requantization (``fixedpoint``), QDQ import (``qdq``),
calibration (``calibrate``) and post-training quantization (``ptq``)."""
