"""Measurement: the speedup calculator (`calc`), text metrics (`metrics`) and the paper's
benchmark sweep with its tables and figures (`bench`)."""
