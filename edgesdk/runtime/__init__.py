"""Backend-independent runtime: shape math, cost model, planning and the Session."""
