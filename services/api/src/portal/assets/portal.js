// Hookstream portal: progressive enhancement only. Every page works without this file.
"use strict";

// Buttons that change something for good ask first.
document.addEventListener("click", (e) => {
  const b = e.target.closest("[data-confirm]");
  if (b && !window.confirm(b.getAttribute("data-confirm"))) {
    e.preventDefault();
  }
});

// "Copy" next to a revealed secret.
for (const btn of document.querySelectorAll("button[data-copy]")) {
  btn.hidden = false;
  btn.addEventListener("click", () => {
    const el = document.getElementById(btn.getAttribute("data-copy"));
    if (el && navigator.clipboard) {
      navigator.clipboard.writeText(el.textContent.trim()).then(() => {
        btn.textContent = "Copied";
      });
    }
  });
}

// A page showing deliveries still in progress reloads itself every few seconds.
const pending = document.querySelector("[data-refresh]");
if (pending) {
  const s = Number(pending.getAttribute("data-refresh")) || 5;
  window.setTimeout(() => window.location.reload(), s * 1000);
}
