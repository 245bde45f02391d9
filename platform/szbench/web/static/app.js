// Every page: a wide table or chart that scrolls sideways inside its box (on a phone) gets a
// keyboard stop, so that it can be scrolled without a mouse. Chromium does this by itself;
// other browsers do not. Without JavaScript the pages work the same, minus that stop.
"use strict";
(function () {
  const selector = "table.data, .table-wrap, figure.chart-box, pre";

  function mark() {
    for (const el of document.querySelectorAll(selector)) {
      if (el.closest(".swagger-ui")) continue;
      const scrolls = el.scrollWidth > el.clientWidth + 1;
      const focusable = el.querySelector("a[href], button, input, select, textarea, [tabindex]");
      if (scrolls && !focusable && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        el.dataset.scrollStop = "1";
      } else if (!scrolls && el.dataset.scrollStop) {
        el.removeAttribute("tabindex");
        delete el.dataset.scrollStop;
      }
    }
  }

  mark();
  let pending = 0;
  window.addEventListener("resize", function () {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(mark);
  });
})();
