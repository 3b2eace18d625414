"""The sherpa-onnx engine: streaming Zipformer transducers and CTC models on the CPU."""
