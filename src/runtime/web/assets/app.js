// tenancy-hub's fleet view: keeps the page live. Opens the stream named by main[data-live] and
// applies its events: "sections" replaces the sections that changed (HTML the operator escaped),
// "page" the whole of main, "gone" ends the stream with a reason. No other script runs.
(function () {
  'use strict';
  var main = document.getElementById('live');
  var status = document.getElementById('status');
  if (!main || !main.dataset.live || !window.EventSource) {
    return;
  }
  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }
  function updated() {
    say('Live · updated ' + new Date().toLocaleTimeString());
  }
  var source = new EventSource(main.dataset.live);
  source.addEventListener('open', function () {
    say('Live');
  });
  source.addEventListener('page', function (e) {
    main.innerHTML = JSON.parse(e.data);
    updated();
  });
  source.addEventListener('sections', function (e) {
    var changed = JSON.parse(e.data);
    for (var i = 0; i < changed.length; i++) {
      var section = document.getElementById(changed[i][0]);
      if (section) {
        section.outerHTML = changed[i][1];
      }
    }
    updated();
  });
  source.addEventListener('gone', function (e) {
    source.close();
    say('No longer live: ' + e.data + ' (reload to sign in again)');
  });
  source.addEventListener('error', function () {
    if (source.readyState === EventSource.CLOSED) {
      say('No longer live: the operator refused the stream (reload to sign in again)');
    } else {
      say('Live updates interrupted; reconnecting…');
    }
  });
})();
