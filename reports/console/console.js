// A live job page: ask the console every few seconds whether the job changed (one cheap query,
// shared by every browser watching it), and only then fetch and replace the part that changed.
(function () {
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
          }
        }
        if (!v.active && v.version === live.dataset.version) return; // ended and drawn: stop
      }
    } catch (e) { /* the console restarting: try again */ }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
})();
