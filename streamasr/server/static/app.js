// The streamasr page: microphone -> AudioWorklet (16 kHz s16le) -> WebSocket /ws; shows the
// growing partial, the committed finals, the first-token latency and the input level.
// With "keep a copy" ticked, the audio sent is kept in the page and offered as a WAV file.
"use strict";

const RATE = 16000;
const $ = (id) => document.getElementById(id);
let socket = null;
let context = null;
let stream = null;
let sending = false; // true between the config and the end message
let kept = []; // Int16Array blocks, exactly as sent, when "keep a copy" is ticked
let refusal = ""; // the server's reason, when it closed the connection (a refused config)

function wsUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const token = new URLSearchParams(location.search).get("token");
  return `${scheme}//${location.host}/ws` + (token ? `?token=${encodeURIComponent(token)}` : "");
}

// Browsers give a page the microphone (navigator.mediaDevices) and AudioWorklet only in a
// secure context: https, or an address of the browser's own machine (localhost, 127.0.0.1).
// Without them Start could only fail, so the page says why and how to open it instead.
function micUnavailable() {
  const worklet = typeof AudioWorkletNode !== "undefined" &&
    typeof AudioContext !== "undefined" && "audioWorklet" in AudioContext.prototype;
  const microphone = !!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia);
  if (worklet && microphone) return null;
  if (!window.isSecureContext) {
    const port = location.port || "80";
    const local = `http://localhost:${port}/`;
    return `The microphone needs https or localhost: this browser gives no microphone to a ` +
      `page at ${location.origin}. Open ${local} on the server's machine; from another ` +
      `machine, forward the port (ssh -L ${port}:localhost:${port} SERVER) and open ${local}; ` +
      `or serve over https (streamasr serve --certfile CERT.pem --keyfile KEY.pem).`;
  }
  return "This browser has no microphone access for pages (navigator.mediaDevices or " +
    "AudioWorklet is missing); use a current Chrome, Firefox or Safari.";
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
    if (socket) socket.close(1000);
    offerCopy();
  }
}

// Broadcast mode: the page at /?room=NAME publishes its captions to room NAME too, whose
// viewers read them at /rooms/NAME (the token, if any, must then be the publish token).
function broadcastRoom() {
  const room = new URLSearchParams(location.search).get("room");
  return room ? { room } : {};
}

function openSocket() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl());
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      ws.send(JSON.stringify({
        sample_rate: RATE, format: "s16le", channels: 1, source: "browser", realtime: true,
        ...broadcastRoom(),
      }));
      sending = true;
      resolve(ws);
    };
    ws.onerror = () => reject(new Error("cannot connect to the server"));
    ws.onmessage = (message) => showEvent(JSON.parse(message.data));
    ws.onclose = (close) => {
      if (close.code !== 1000 && close.reason) {
        refusal = close.reason;
        setStatus(`closed: ${close.reason}`);
      }
      teardown();
    };
  });
}

function onBlock(message) {
  const level = Math.min(1, message.data.peak);
  $("level-bar").style.width = `${Math.round(level * 100)}%`;
  $("level-bar").style.background = level > 0.95 ? "#c33" : "#3a3";
  if (!sending || !socket || socket.readyState !== WebSocket.OPEN) return;
  socket.send(message.data.pcm);
  if ($("keep").checked) kept.push(new Int16Array(message.data.pcm));
}

async function start() {
  $("start").disabled = true;
  $("copy").hidden = true;
  kept = [];
  refusal = "";
  setStatus("connecting");
  try {
    // ask for 16 kHz; a browser that keeps its own rate is downsampled in the worklet
    try {
      context = new AudioContext({ sampleRate: RATE });
    } catch (error) {
      context = new AudioContext();
    }
    await context.audioWorklet.addModule("worklet.js");
    const worklet = new AudioWorkletNode(context, "downsampler", {
      processorOptions: { targetRate: RATE },
    });
    worklet.port.onmessage = onBlock;
    // the socket and the worklet are ready before the microphone opens: no audio is lost
    socket = await openSocket();
    setStatus("asking for the microphone");
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    // the server may have refused the config meanwhile: the page was torn down
    if (!socket || !context) throw new Error(refusal || "the server closed the connection");
    context.createMediaStreamSource(stream).connect(worklet);
    // a node only runs while it leads to the output: connect it through a muted gain
    const mute = context.createGain();
    mute.gain.value = 0;
    worklet.connect(mute).connect(context.destination);
    await context.resume();
    setStatus("listening");
    $("stop").disabled = false;
  } catch (error) {
    setStatus(refusal ? `refused by the server: ${refusal}` : `cannot start: ${error.message || error}`);
    if (socket) socket.close(1000);
    teardown();
  }
}

function stop() {
  $("stop").disabled = true;
  setStatus("finishing");
  sending = false;
  if (socket && socket.readyState === WebSocket.OPEN) {
    // the server sends the last final and a summary; then the page closes the connection
    socket.send(JSON.stringify({ type: "end" }));
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
  sending = false;
  stopAudio();
  socket = null;
  $("start").disabled = false;
  $("stop").disabled = true;
}

function keptWav() {
  const samples = kept.reduce((total, block) => total + block.length, 0);
  const view = new DataView(new ArrayBuffer(44 + samples * 2));
  const text = (offset, value) => [...value].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF");
  view.setUint32(4, 36 + samples * 2, true);
  text(8, "WAVEfmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, RATE, true);
  view.setUint32(28, RATE * 2, true);
  view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  text(36, "data");
  view.setUint32(40, samples * 2, true);
  let offset = 44;
  for (const block of kept) {
    for (const sample of block) {
      view.setInt16(offset, sample, true);
      offset += 2;
    }
  }
  return new Blob([view.buffer], { type: "audio/wav" });
}

function offerCopy() {
  if (!kept.length) return;
  const link = $("copy");
  if (link.href) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(keptWav());
  link.hidden = false;
}

const why = micUnavailable();
if (why) {
  $("mic-note").textContent = why;
  $("mic-note").hidden = false;
  $("start").disabled = true;
  setStatus("no microphone here");
}
$("start").addEventListener("click", start);
$("stop").addEventListener("click", stop);
