// rewind dashboard: applies the server-sent events of the page's stream to the DOM. The
// server renders every fragment (html/template); this file only puts them in place. No
// polling and no reloads: the browser's EventSource reconnects by itself.
(function () {
  'use strict';
  var body = document.body;

  function fromHTML(html) {
    var t = document.createElement('template');
    t.innerHTML = html;
    return t.content.firstElementChild;
  }

  function setBanner(id, show, text) {
    var b = document.getElementById(id);
    if (!b) return;
    if (text !== undefined) b.textContent = text;
    b.hidden = !show;
  }

  function upsertCell(c) {
    var el = document.getElementById(c.id);
    if (!c.html) { if (el) el.remove(); return; }
    var next = fromHTML(c.html);
    if (el) {
      if (el.outerHTML !== c.html) el.replaceWith(next);
      return;
    }
    var wave = document.getElementById('wave-' + c.wave);
    if (!wave) {
      wave = fromHTML(c.waveHTML);
      var waves = document.getElementById('waves');
      var after = null;
      waves.querySelectorAll('section.wave').forEach(function (w) {
        if (Number(w.dataset.wave) < c.wave) after = w;
      });
      if (after) after.after(wave); else waves.prepend(wave);
    }
    var grid = wave.querySelector('.grid');
    var placed = false;
    grid.querySelectorAll('.cell').forEach(function (other) {
      if (!placed && other.id > c.id) { other.before(next); placed = true; }
    });
    if (!placed) grid.append(next);
  }

  function upsertRow(r) {
    var el = document.getElementById(r.id);
    if (!r.html) { if (el) el.remove(); return; }
    var tbody = document.getElementById('rows');
    if (!tbody) return;
    var tmp = document.createElement('tbody');
    tmp.innerHTML = r.html;
    var next = tmp.firstElementChild;
    if (el) { el.replaceWith(next); return; }
    tbody.append(next);
    tbody.closest('table').hidden = false;
    var empty = document.getElementById('empty');
    if (empty) empty.remove();
  }

  var stream = body.dataset.stream;
  if (stream) {
    var es = new EventSource(stream);
    es.addEventListener('open', function () { setBanner('stream-banner', false); });
    es.addEventListener('error', function () { setBanner('stream-banner', true); });
    es.addEventListener('hub', function (e) {
      var d = JSON.parse(e.data);
      setBanner('hub-banner', !d.ok, d.message);
    });
    es.addEventListener('cells', function (e) { JSON.parse(e.data).forEach(upsertCell); });
    es.addEventListener('rows', function (e) { JSON.parse(e.data).forEach(upsertRow); });
    es.addEventListener('rollout', function (e) {
      var d = JSON.parse(e.data);
      var head = document.getElementById('rollout-head');
      if (head && head.innerHTML !== d.head) head.innerHTML = d.head;
      var hist = document.getElementById('history');
      if (hist && hist.innerHTML !== d.history) hist.innerHTML = d.history;
    });
  }

  // Actions (only on a dashboard started with --enable-actions): each asks for confirmation.
  var dialog = document.getElementById('confirm');
  if (!dialog) return;
  var pending = null;
  document.addEventListener('click', function (e) {
    var b = e.target.closest('button[data-action]');
    if (!b) return;
    pending = b.dataset.action;
    document.getElementById('confirm-text').textContent = b.dataset.confirm;
    document.getElementById('confirm-reason-label').hidden = !b.dataset.reason;
    document.getElementById('confirm-reason').value = '';
    dialog.showModal();
  });
  dialog.addEventListener('close', function () {
    if (dialog.returnValue !== 'ok' || !pending) { pending = null; return; }
    var action = pending;
    pending = null;
    var form = new URLSearchParams();
    form.set('reason', document.getElementById('confirm-reason').value);
    var name = decodeURIComponent(location.pathname.split('/')[2]);
    fetch('/rollouts/' + encodeURIComponent(name) + '/actions/' + action, {
      method: 'POST', body: form, headers: {'X-Rewind-Token': body.dataset.token}
    }).then(function (r) { return r.json().catch(function () { return {error: r.statusText}; }); })
      .then(function (d) {
        var f = document.getElementById('flash');
        f.textContent = d.error ? 'Failed: ' + d.error : d.message;
        f.className = 'flash ' + (d.error ? 'flash-error' : 'flash-ok');
        f.hidden = false;
      });
  });
})();
