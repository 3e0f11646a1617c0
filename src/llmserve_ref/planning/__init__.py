"""Planning: numbers before hardware (KV math, catalogs, roofline, simulator, capacity)."""
