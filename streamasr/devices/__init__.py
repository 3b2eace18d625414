"""The microphone: capture, its device list, saving, the live capture loop."""
