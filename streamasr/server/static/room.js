// The viewer page of a streamasr room (/rooms/NAME): the room's captions, large, the
// newest at the bottom, the partial apart from the finals; earlier finals scroll back (the
// page follows the newest lines unless the reader scrolled up); reconnects with the last
// room_seq it saw, so no final is missed or shown twice.
"use strict";

const KEPT = 500; // finals kept to scroll back to (with the partial below them)
const FOLLOW_PX = 48; // a reader this near the bottom follows the newest lines
const FAILURES = {
  4401: ["The view token was refused: ask for the viewer link with its token (?token=...).", 0],
  4404: ["No such room yet, check the link (names are case-sensitive); waiting for the speaker.", 5],
  4429: ["This room is full; trying again shortly.", 10],
  1001: ["The server is restarting or shutting down; reconnecting.", 3],
  1007: ["This address is not a room's (check the link).", 0],
  1008: ["The connection fell behind; catching up.", 0.5],
};

const params = new URLSearchParams(location.search);
const room = decodeURIComponent(location.pathname.split("/").filter(Boolean)[1] || "");
const token = params.get("token");
const captions = document.getElementById("captions");
const statusLine = document.getElementById("status");
let lastSeq = 0;
let talk = null; // the talk lastSeq counts in: a restarted server's room is another talk
let partial = null; // the <p> of the open segment's partial
let retryS = 1;
let following = true; // the view stays on the newest lines (the reader has not scrolled up)

captions.addEventListener("scroll", () => {
  following = captions.scrollHeight - captions.scrollTop - captions.clientHeight <= FOLLOW_PX;
});

function follow() {
  if (following) captions.scrollTop = captions.scrollHeight;
}

function say(text, problem) {
  statusLine.textContent = text;
  statusLine.classList.toggle("problem", Boolean(problem));
}

function feedUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = new URLSearchParams();
  if (token) query.set("token", token);
  if (lastSeq) query.set("after", String(lastSeq));
  if (talk) query.set("talk", talk);
  return `${scheme}//${location.host}/rooms/${encodeURIComponent(room)}/ws?${query}`;
}

// -- captions -------------------------------------------------------------------------------

function showFinal(record) {
  if (partial) { partial.remove(); partial = null; }
  if (!record.text.trim()) return;
  const line = document.createElement("p");
  line.className = "final";
  line.textContent = record.text;
  captions.appendChild(line);
  const finals = [...captions.querySelectorAll(".final")];
  while (finals.length > KEPT) finals.shift().remove();
  finals.forEach((node, index) => node.classList.toggle("old", index < finals.length - 1));
  follow();
}

function showPartial(record) {
  if (!partial) {
    partial = document.createElement("p");
    partial.className = "partial";
    captions.appendChild(partial);
  }
  partial.textContent = record.text;
  follow();
}

function take(record) {
  if (record.room_seq !== undefined) {
    if (record.room_seq <= lastSeq) return; // seen before a reconnect
    lastSeq = record.room_seq;
  }
  if (record.type === "final") showFinal(record);
  else if (record.type === "partial") showPartial(record);
  else if (record.type === "status") {
    if (record.talk && talk && record.talk !== talk) newTalk();
    if (record.talk) talk = record.talk;
    if (!record.publisher) say("the speaker is not connected; waiting", false);
    else say(record.took_over ? "a new speaker took over; live" : "live", false);
  }
}

function newTalk() {
  // the room restarted its numbering: what is on screen was another talk
  captions.replaceChildren();
  partial = null;
  lastSeq = 0;
}

// -- the feed -------------------------------------------------------------------------------

function connect() {
  let ws;
  try {
    ws = new WebSocket(feedUrl());
  } catch (error) {
    say(`cannot open the feed: ${error.message}`, true);
    return;
  }
  ws.onopen = () => { retryS = 1; };
  ws.onmessage = (message) => take(JSON.parse(message.data));
  ws.onclose = (event) => failed(event.code, event.reason);
}

function failed(code, reason) {
  const known = FAILURES[code];
  if (known) {
    const [text, again] = known;
    say(text, code !== 1008);
    if (again) setTimeout(connect, again * 1000);
    return;
  }
  if (code === 1000) return;
  // 1006: no close frame, the server is gone or unreachable
  say(`The server cannot be reached${reason ? ` (${reason})` : ""}; retrying in ${retryS} s.`, true);
  setTimeout(connect, retryS * 1000);
  retryS = Math.min(30, retryS * 2);
}

// -- controls -------------------------------------------------------------------------------

function setupControls() {
  const root = document.documentElement;
  let size = Number(localStorage.getItem("streamasr-size")) || 2.2;
  const apply = () => {
    root.style.setProperty("--size", `${size}rem`);
    localStorage.setItem("streamasr-size", String(size));
  };
  document.getElementById("smaller").onclick = () => { size = Math.max(1, size - 0.3); apply(); };
  document.getElementById("larger").onclick = () => { size = Math.min(6, size + 0.3); apply(); };
  apply();
  const theme = document.getElementById("theme");
  const setDark = (dark) => {
    document.body.classList.toggle("dark", dark);
    theme.textContent = dark ? "light" : "dark";
    localStorage.setItem("streamasr-dark", dark ? "1" : "");
  };
  theme.onclick = () => setDark(!document.body.classList.contains("dark"));
  const stored = localStorage.getItem("streamasr-dark");
  setDark(stored === null ? matchMedia("(prefers-color-scheme: dark)").matches : stored === "1");
  for (const fmt of ["txt", "srt", "vtt"]) {
    const link = document.getElementById(`get-${fmt}`);
    const query = token ? `?token=${encodeURIComponent(token)}` : "";
    link.href = `/rooms/${encodeURIComponent(room)}/transcript.${fmt}${query}`;
    link.download = `${room}.${fmt}`;
  }
}

document.getElementById("room-name").textContent = room;
document.title = `${room}: live captions`;
setupControls();
connect();
