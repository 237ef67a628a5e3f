// The cosched console: the server sends the live part of the page as HTML (server-sent
// events) and this swaps it in; actions are posted with the user's token, which stays in this
// tab (sessionStorage) and is sent only as an Authorization header.
"use strict";

const live = document.getElementById("live");
const said = document.getElementById("said");
const tokenInput = document.getElementById("token");
const TOKEN_KEY = "cosched-token";

function say(text) {
  said.textContent = text;
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

if (token()) say("acting with your token");

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = tokenInput.value.trim();
  tokenInput.value = "";
  if (value) {
    sessionStorage.setItem(TOKEN_KEY, value);
    say("acting with your token");
  } else {
    sessionStorage.removeItem(TOKEN_KEY);
    say("read-only: actions need a token (cosched console-token)");
  }
});

// Classes picked but not set yet survive the updates; none comes while a list is open.
const picked = {};
live.addEventListener("change", (event) => {
  if (event.target.matches("select[data-class-of]")) {
    picked[event.target.dataset.classOf] = event.target.value;
  }
});

const events = new EventSource("/events");
events.onmessage = (event) => {
  if (document.activeElement?.tagName === "SELECT" && live.contains(document.activeElement)) return;
  live.innerHTML = event.data;
  for (const [job, value] of Object.entries(picked)) {
    const list = live.querySelector(`select[data-class-of="${job}"]`);
    if (list) list.value = value;
  }
  document.body.dataset.live = "yes";
};
events.onerror = () => {
  document.body.dataset.live = "no";
};

live.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-act]");
  if (!button) return;
  const held = token();
  if (!held) {
    say("read-only: paste a token from `cosched console-token` first");
    return;
  }
  const job = button.dataset.job;
  let path = `/jobs/${job}/${button.dataset.act}`;
  if (button.dataset.act === "class") {
    const choice = live.querySelector(`select[data-class-of="${job}"]`);
    path += `/${encodeURIComponent(choice.value)}`;
    delete picked[job];
  }
  try {
    const answer = await fetch(path, {
      method: "POST",
      headers: { Authorization: `Bearer ${held}` },
    });
    const body = await answer.json();
    say(body.ok ? body.message : `refused: ${body.error}`);
  } catch (error) {
    say(`the daemon did not answer: ${error}`);
  }
});
