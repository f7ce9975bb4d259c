// The console's one script; every page works without it (the times stay in UTC, a destructive
// button asks nothing, the copy buttons do nothing).
(function () {
  // A moment: <time datetime="...Z">, shown in the viewer's time zone in the console's one style
  // (YYYY-MM-DD HH:MM:SS and the zone's name); the UTC text stays in the title.
  const parts = new Intl.DateTimeFormat("en-CA", {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  });
  function localTimes(root) {
    for (const t of root.querySelectorAll("time[datetime]")) {
      const at = new Date(t.getAttribute("datetime"));
      if (isNaN(at)) continue;
      const p = Object.fromEntries(parts.formatToParts(at).map((x) => [x.type, x.value]));
      t.textContent = `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
      t.dataset.local = "1";
    }
  }
  localTimes(document);

  // A copy button: the whole id to the clipboard (a text area's copy where the page is not a
  // secure context and the clipboard API is missing).
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button.copy[data-copy]");
    if (!b) return;
    const text = b.dataset.copy;
    try {
      await navigator.clipboard.writeText(text);
    } catch (err) {
      const area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    b.textContent = "copied";
    setTimeout(() => { b.textContent = "copy"; }, 1500);
  });

  // A destructive action asks first: data-confirm on its button or its form.
  document.addEventListener("submit", (e) => {
    const asks = (e.submitter && e.submitter.dataset.confirm) || e.target.dataset.confirm;
    if (asks && !window.confirm(asks)) e.preventDefault();
  });

  // A live job page: ask the console every few seconds whether the job changed (one cheap
  // query, shared by every browser watching it), and only then fetch and replace what changed.
  const live = document.getElementById("live");
  if (!live) return;
  const job = live.dataset.job;
  const every = Number(live.dataset.refresh) || 2000;
  async function tick() {
    try {
      const r = await fetch(`/runs/${job}/version`, { credentials: "same-origin", cache: "no-store" });
      if (r.ok) {
        const v = await r.json();
        if (v.version !== live.dataset.version) {
          const page = await fetch(`/runs/${job}/live`, { credentials: "same-origin", cache: "no-store" });
          if (page.ok) {
            live.innerHTML = await page.text();
            live.dataset.version = v.version;
            localTimes(live);
          }
        }
        if (!v.active && v.version === live.dataset.version) return; // ended and drawn: stop
      }
    } catch (e) { /* the console restarting: try again */ }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
})();
