// The API docs page (szbench.web.api_docs): start Swagger UI on the OpenAPI document that the
// page names. A file rather than FastAPI's inline script, so the page runs under the same
// Content-Security-Policy as the others (scripts from this origin only).
"use strict";
(function () {
  const root = document.getElementById("swagger-ui");
  // FastAPI's defaults, minus the online validator (another origin, never reachable offline).
  SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    domNode: root,
    layout: "BaseLayout",
    // Deep links put a link inside each operation's toggle button (a control inside a
    // control, which screen readers cannot reach); the operations keep their ids.
    deepLinking: false,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
  // Swagger UI's copy buttons are icons without a name (a screen reader would say "button"
  // and nothing else), and its code blocks scroll sideways on a phone without a keyboard
  // stop. Both appear as operations are opened, hence the observer.
  function fixUp() {
    for (const button of root.querySelectorAll(".copy-to-clipboard button:not([aria-label])")) {
      button.setAttribute("aria-label", "Copy to clipboard");
    }
    for (const pre of root.querySelectorAll("pre:not([tabindex])")) {
      pre.setAttribute("tabindex", "0");
    }
  }
  new MutationObserver(fixUp).observe(root, { childList: true, subtree: true });
})();
