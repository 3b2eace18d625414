// The streamasr page: microphone -> AudioWorklet (16 kHz s16le) -> WebSocket /ws; shows the
// growing partial, the committed finals, the first-token latency and the input level.
"use strict";

const RATE = 16000;
const $ = (id) => document.getElementById(id);
let socket = null;
let context = null;
let stream = null;

function wsUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const token = new URLSearchParams(location.search).get("token");
  return `${scheme}//${location.host}/ws` + (token ? `?token=${encodeURIComponent(token)}` : "");
}

function setStatus(text) {
  $("status").textContent = text;
}

function showEvent(event) {
  if (event.type === "partial") {
    $("partial").textContent = event.text;
  } else if (event.type === "final") {
    const line = document.createElement("p");
    line.className = "final";
    line.textContent = event.text;
    $("finals").appendChild(line);
    $("partial").textContent = "";
  } else if (event.type === "first_token") {
    const wall = event.wall_latency_s === null ? "" : `, ${Math.round(event.wall_latency_s * 1000)} ms wall clock`;
    $("latency").textContent = `${Math.round(event.latency_s * 1000)} ms of audio after onset${wall}`;
  } else if (event.type === "summary") {
    setStatus(`stopped: ${event.audio_s.toFixed(1)} s of audio`);
  }
}

async function start() {
  $("start").disabled = true;
  setStatus("asking for the microphone");
  try {
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    // ask for 16 kHz; a browser that keeps its own rate is downsampled in the worklet
    try {
      context = new AudioContext({ sampleRate: RATE });
    } catch (error) {
      context = new AudioContext();
    }
    await context.audioWorklet.addModule("worklet.js");
    const source = context.createMediaStreamSource(stream);
    const worklet = new AudioWorkletNode(context, "downsampler", {
      processorOptions: { targetRate: RATE },
    });
    socket = new WebSocket(wsUrl());
    socket.binaryType = "arraybuffer";
    socket.onopen = () => {
      socket.send(JSON.stringify({
        sample_rate: RATE, format: "s16le", channels: 1, source: "browser", realtime: true,
      }));
      setStatus("listening");
      $("stop").disabled = false;
    };
    socket.onmessage = (message) => showEvent(JSON.parse(message.data));
    socket.onclose = (close) => {
      if (close.code !== 1000 && close.reason) setStatus(`closed: ${close.reason}`);
      teardown();
    };
    worklet.port.onmessage = (message) => {
      const level = Math.min(1, message.data.peak);
      $("level-bar").style.width = `${Math.round(level * 100)}%`;
      $("level-bar").style.background = level > 0.95 ? "#c33" : "#3a3";
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(message.data.pcm);
    };
    source.connect(worklet);
  } catch (error) {
    setStatus(`cannot start: ${error.message || error}`);
    teardown();
  }
}

function stop() {
  $("stop").disabled = true;
  setStatus("finishing");
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ type: "end" }));
    // the server sends the last final and a summary; then the page closes the connection
    const pending = socket;
    const done = (message) => {
      if (JSON.parse(message.data).type === "summary") pending.close(1000);
    };
    pending.addEventListener("message", done);
  }
  stopAudio();
}

function stopAudio() {
  if (stream) stream.getTracks().forEach((track) => track.stop());
  if (context) context.close();
  stream = null;
  context = null;
  $("level-bar").style.width = "0";
}

function teardown() {
  stopAudio();
  socket = null;
  $("start").disabled = false;
  $("stop").disabled = true;
}

$("start").addEventListener("click", start);
$("stop").addEventListener("click", stop);
