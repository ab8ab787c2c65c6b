// The language menu switches as soon as a language is chosen (a script file, not an inline
// handler: the Content-Security-Policy runs no inline script).
"use strict";

(function () {
  const select = document.getElementById("language-select");
  if (select) select.addEventListener("change", () => select.form.submit());
})();
