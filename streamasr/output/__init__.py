"""What a stream's events become: renderers, output files, progress, punctuation."""
