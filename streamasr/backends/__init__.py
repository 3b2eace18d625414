"""Recognition engines behind one small protocol (see base.py)."""
