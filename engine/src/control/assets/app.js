// Grid control plane: the little this page does in the browser. It never asks an
// owner anything: inspections are the page's "Inspect now" forms, sent by the operator.
"use strict";
(function () {
  // Notes survive navigation: kept in this browser's local storage, across panels.
  const notes = document.getElementById("notes");
  if (notes) {
    const key = "grid-control-notes";
    notes.value = window.localStorage.getItem(key) || "";
    notes.addEventListener("input", function () {
      window.localStorage.setItem(key, notes.value);
    });
  }
  // An inspection asked from this panel is named; if the panel closes (another page
  // opened, the tab closed) before the reply, it says so: the reply, when it comes, is
  // then kept as uncertain — never shown as current to a panel that was not there.
  let asked = null;
  for (const form of document.querySelectorAll("form[action='/inspect'], form[action='/barrier'], form[action='/surrender']")) {
    form.addEventListener("submit", function () {
      const asker = form.querySelector("input[name='asker']");
      const csrf = form.querySelector("input[name='csrf']");
      if (asker && csrf) {
        asker.value = window.crypto.randomUUID();
        asked = { asker: asker.value, csrf: csrf.value };
      }
    });
  }
  window.addEventListener("pagehide", function () {
    if (asked) {
      navigator.sendBeacon("/closed", new URLSearchParams(asked));
    }
  });
  // Ages count up from what the host rendered, without asking it again.
  const rendered = Date.now();
  const ages = document.querySelectorAll("[data-age-s]");
  if (ages.length > 0) {
    window.setInterval(function () {
      const passed = Math.floor((Date.now() - rendered) / 1000);
      for (const age of ages) {
        age.textContent = Number(age.dataset.ageS) + passed + " s";
      }
    }, 1000);
  }
})();
