// The console's one script: a run page whose run is going keeps its call
// tree current from server-sent events, and reloads once the run settles.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || live.dataset.live !== "on") return;
  const run = live.dataset.run;
  const source = new EventSource("/runs/" + run + "/live");
  let fetching = false;
  let again = false;
  async function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      const answer = await fetch("/runs/" + run + "/tree", { credentials: "same-origin" });
      if (answer.ok) live.innerHTML = await answer.text();
    } finally {
      fetching = false;
      if (again) { again = false; refresh(); }
    }
  }
  source.addEventListener("change", refresh);
  source.addEventListener("settled", function () { source.close(); location.reload(); });
  source.addEventListener("failed", function (e) {
    source.close();
    const p = document.createElement("p");
    p.className = "alarm";
    p.textContent = "Live updates stopped: " + e.data;
    live.prepend(p);
  });
})();
