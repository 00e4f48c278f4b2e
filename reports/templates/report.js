(function () {
  "use strict";
  // Controls that need JavaScript stay hidden without it; the page itself shows everything.
  document.querySelectorAll("[data-needs-js]").forEach(function (el) { el.hidden = false; });

  var severityBoxes = Array.prototype.slice.call(document.querySelectorAll(".sev-filter"));
  var categorySelect = document.getElementById("category-filter");
  var namespaceSelect = document.getElementById("namespace-filter");
  var textInput = document.getElementById("text-filter");
  var shownLabel = document.getElementById("shown-count");
  var noMatch = document.getElementById("no-match");
  var groups = Array.prototype.slice.call(document.querySelectorAll("#findings details.check"));

  function applyFilters() {
    var severities = {};
    severityBoxes.forEach(function (box) { severities[box.value] = box.checked; });
    var category = categorySelect ? categorySelect.value : "";
    var namespace = namespaceSelect ? namespaceSelect.value : "";
    var needle = textInput ? textInput.value.trim().toLowerCase() : "";
    var shown = 0;
    var total = 0;
    groups.forEach(function (group) {
      var inGroup = 0;
      group.querySelectorAll(".finding").forEach(function (finding) {
        total += 1;
        var haystack = (group.getAttribute("data-search") + " " + finding.textContent).toLowerCase();
        var visible = severities[finding.getAttribute("data-severity")] === true &&
          (!category || finding.getAttribute("data-category") === category) &&
          (!namespace || finding.getAttribute("data-namespace") === namespace) &&
          (!needle || haystack.indexOf(needle) !== -1);
        finding.hidden = !visible;
        if (visible) { inGroup += 1; }
      });
      group.hidden = inGroup === 0;
      var counter = group.querySelector(".shown-in-group");
      if (counter) { counter.textContent = inGroup === group.querySelectorAll(".finding").length ? "" : inGroup + " shown · "; }
      shown += inGroup;
    });
    if (shownLabel) { shownLabel.textContent = shown === total ? "All " + total + " findings shown" : shown + " of " + total + " findings shown"; }
    if (noMatch) { noMatch.hidden = shown !== 0 || total === 0; }
  }

  severityBoxes.forEach(function (box) { box.addEventListener("change", applyFilters); });
  [categorySelect, namespaceSelect].forEach(function (select) {
    if (select) { select.addEventListener("change", applyFilters); }
  });
  if (textInput) { textInput.addEventListener("input", applyFilters); }
  var reset = document.getElementById("reset-filters");
  if (reset) {
    reset.addEventListener("click", function () {
      severityBoxes.forEach(function (box) { box.checked = true; });
      if (categorySelect) { categorySelect.value = ""; }
      if (namespaceSelect) { namespaceSelect.value = ""; }
      if (textInput) { textInput.value = ""; }
      applyFilters();
    });
  }
  applyFilters();

  // Copy: the async clipboard API where the browser allows it, else select the snippet so
  // that Ctrl+C copies it (file:// pages are not always granted clipboard access).
  function selectContents(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  document.querySelectorAll("button.copy").forEach(function (button) {
    button.addEventListener("click", function () {
      var code = button.closest(".snippet").querySelector("pre");
      var done = function () { button.textContent = "Copied"; };
      var fallback = function () { selectContents(code); button.textContent = "Selected: press Ctrl+C"; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(code.textContent).then(done, fallback);
      } else {
        fallback();
      }
      window.setTimeout(function () { button.textContent = "Copy"; }, 2500);
    });
  });

  // Closed <details> do not print: open every one for the printed document.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
})();
