// AudioWorklet: mixes the input to mono, downsamples it to 16 kHz (averaging the input
// samples that fall into each output sample), and posts Int16 PCM blocks of ~100 ms plus
// the block's peak level to the page.
class Downsampler extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.target = (options.processorOptions && options.processorOptions.targetRate) || 16000;
    this.step = sampleRate / this.target; // input samples per output sample (>= 1)
    this.position = 0; // input samples counted into the current output sample
    this.sum = 0;
    this.count = 0;
    this.blockSize = Math.round(this.target / 10);
    this.out = new Int16Array(this.blockSize);
    this.filled = 0;
    this.peak = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const channels = input.length;
    const frames = input[0].length;
    for (let i = 0; i < frames; i++) {
      let value = 0;
      for (let c = 0; c < channels; c++) value += input[c][i];
      value /= channels;
      this.peak = Math.max(this.peak, Math.abs(value));
      this.sum += value;
      this.count += 1;
      this.position += 1;
      if (this.position >= this.step) {
        this.position -= this.step;
        const mean = this.sum / this.count;
        this.sum = 0;
        this.count = 0;
        const clipped = Math.max(-1, Math.min(1, mean));
        this.out[this.filled++] = clipped < 0 ? Math.round(clipped * 32768) : Math.round(clipped * 32767);
        if (this.filled === this.blockSize) {
          this.port.postMessage({ pcm: this.out.buffer, peak: this.peak }, [this.out.buffer]);
          this.out = new Int16Array(this.blockSize); // the old buffer went to the page
          this.filled = 0;
          this.peak = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("downsampler", Downsampler);
