package dashboard

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

//go:embed assets
var assets embed.FS

func staticFS() fs.FS {
	sub, _ := fs.Sub(assets, "assets")
	return sub
}

// pages are the parsed templates: one set per page over the shared layout and fragments.
type pages struct {
	byName map[string]*template.Template
	frags  *template.Template
}

var funcs = template.FuncMap{
	"lower": strings.ToLower,
	"phaseClass": func(p string) string {
		return "phase-" + strings.ToLower(p)
	},
}

func loadPages() (*pages, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/fragments.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}, frags: base}
	for _, name := range []string{"list", "rollout", "members", "snapshot", "notfound", "login", "denied"} {
		t, err := template.Must(base.Clone()).ParseFS(assets, "assets/templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		p.byName[name] = t
	}
	return p, nil
}

// fragment renders a fragment template to a string (for an event).
func (p *pages) fragment(name string, data any) string {
	var b bytes.Buffer
	if err := p.frags.ExecuteTemplate(&b, name, data); err != nil {
		return template.HTMLEscapeString("rendering " + name + ": " + err.Error())
	}
	return b.String()
}

// pageData is what every page gets.
type pageData struct {
	Title, Namespace, Stream, Token string
	// User is who signed in (only when the dashboard authenticates).
	User       string
	HubOK      bool
	HubMessage string
	Actions    bool
	Data       any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, page, title, stream string, data any) {
	ok, msg := s.hubState()
	pd := pageData{Title: title, Namespace: s.opts.Namespace, Stream: stream, HubOK: ok, HubMessage: msg, Actions: s.actionsEnabled(), Data: data}
	sess := sessionFrom(r.Context())
	if sess != nil {
		pd.User = sess.User.Username
	}
	if pd.Actions {
		pd.Token = s.actionToken(r)
	}
	var b bytes.Buffer
	if err := s.pages.byName[page].ExecuteTemplate(&b, "layout", pd); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request, kind, name, hint string) {
	s.render(w, r, http.StatusNotFound, "notfound", kind+" not found", "", map[string]string{"Kind": kind, "Name": name, "Hint": hint})
}

func (s *Server) listPage(w http.ResponseWriter, r *http.Request) {
	var list v1alpha1.RolloutList
	if err := s.cache.List(r.Context(), &list, client.InNamespace(s.opts.Namespace)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	rows := make([]rowView, 0, len(list.Items))
	for i := range list.Items {
		rows = append(rows, rolloutRow(&list.Items[i]))
	}
	s.render(w, r, http.StatusOK, "list", "Rollouts", "/events", rows)
}

// rolloutData is a Rollout page.
type rolloutData struct {
	Head    headView
	Waves   []waveView
	History []entryView
	Total   int
}

func (s *Server) rolloutPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ro := &v1alpha1.Rollout{}
	if err := s.cache.Get(r.Context(), client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, ro); err != nil {
		if apierrors.IsNotFound(err) {
			s.notFound(w, r, "Rollout", name, "")
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var list v1alpha1.RolloutTargetList
	if err := s.cache.List(r.Context(), &list, client.InNamespace(s.opts.Namespace), client.MatchingLabels{v1alpha1.LabelRollout: ro.Name}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	d := rolloutData{Head: s.rolloutHead(ro), Waves: grid(ro, list.Items), History: historyView(ro), Total: len(list.Items)}
	s.render(w, r, http.StatusOK, "rollout", "Rollout "+ro.Name, "/events?rollout="+url.QueryEscape(ro.Name), d)
}

// membersData is the members page.
type membersData struct {
	Members               []memberView
	Rollouts              []string
	Checked, CanCheck     bool
	CheckError, CheckedAt string
}

func (s *Server) membersPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var mcs v1alpha1.MemberClusterList
	var ros v1alpha1.RolloutList
	var targets v1alpha1.RolloutTargetList
	for _, l := range []client.ObjectList{&mcs, &ros, &targets} {
		opts := []client.ListOption{}
		if _, ok := l.(*v1alpha1.MemberClusterList); !ok {
			opts = append(opts, client.InNamespace(s.opts.Namespace))
		}
		if err := s.cache.List(ctx, l, opts...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	sort.Slice(mcs.Items, func(i, j int) bool { return mcs.Items[i].Name < mcs.Items[j].Name })
	d := membersData{CanCheck: s.opts.Check != nil}
	for _, ro := range ros.Items {
		d.Rollouts = append(d.Rollouts, ro.Name)
	}
	slices.Sort(d.Rollouts)
	checks := map[string][]MemberCheck{}
	if r.URL.Query().Get("check") != "" && s.opts.Check != nil {
		d.Checked, d.CheckedAt = true, time.Now().UTC().Format(time.DateTime)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var errs []string
		for _, ro := range ros.Items {
			if ro.Status.CurrentRelease == "" {
				continue
			}
			res, err := s.opts.Check(cctx, ro.Spec.Operator, ro.Status.CurrentRelease)
			if err != nil {
				errs = append(errs, fmt.Sprintf("rollout %s: %v", ro.Name, err))
				continue
			}
			for _, c := range res {
				checks[c.Cluster] = append(checks[c.Cluster], c)
			}
		}
		cancel()
		d.CheckError = strings.Join(errs, "; ")
	}
	for i := range mcs.Items {
		m := memberOf(&mcs.Items[i])
		for j := range targets.Items {
			t := &targets.Items[j]
			if t.Spec.Cluster != m.Name {
				continue
			}
			inst, phase := installedByTarget(t)
			m.ByRollout = append(m.ByRollout, memberRollout{Rollout: t.Spec.Rollout, Installed: inst, Phase: phase})
		}
		sort.Slice(m.ByRollout, func(a, b int) bool { return m.ByRollout[a].Rollout < m.ByRollout[b].Rollout })
		m.Checks = checks[m.Name]
		d.Members = append(d.Members, m)
	}
	s.render(w, r, http.StatusOK, "members", "Members", "", d)
}

// objectView is one object of a snapshot. Secrets are listed with their keys only.
type objectView struct {
	Section, Kind, Namespace, Name, Phase string
	SecretKeys                            []string
	Secret                                bool
}

type changeView struct {
	Type, Object string
	Fields       []snapshot.FieldChange
}

type snapshotData struct {
	Snap *v1alpha1.Snapshot
	// CanLive: the live cluster can be captured for a diff (Options.Live).
	CanLive    bool
	LiveOption string
	Objects    []objectView
	LoadError  string
	Others     []string
	DiffWith   string
	Changes    []changeView
	DiffError  string
	CapturedAt string
}

func (s *Server) snapshotPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("name")
	snap := &v1alpha1.Snapshot{}
	if err := s.cache.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, snap); err != nil {
		if apierrors.IsNotFound(err) {
			s.notFound(w, r, "Snapshot", name, "")
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	d := snapshotData{Snap: snap, CanLive: s.opts.Live != nil, LiveOption: liveDiff}
	if snap.Status.CapturedAt != nil {
		d.CapturedAt = ts(snap.Status.CapturedAt)
	}
	var others v1alpha1.SnapshotList
	if err := s.cache.List(ctx, &others, client.InNamespace(s.opts.Namespace)); err == nil {
		for _, o := range others.Items {
			if o.Name != snap.Name && o.Spec.Cluster == snap.Spec.Cluster && o.Spec.Operator == snap.Spec.Operator {
				d.Others = append(d.Others, o.Name)
			}
		}
		slices.Sort(d.Others)
	}
	hub := &snapshot.Hub{Client: s.reader}
	hdr, entries, err := hub.Load(ctx, snap)
	if err != nil {
		d.LoadError = err.Error()
		s.render(w, r, http.StatusOK, "snapshot", "Snapshot "+name, "", d)
		return
	}
	for _, e := range entries {
		gvk := e.Object.GroupVersionKind()
		o := objectView{Section: e.Section, Kind: gvk.GroupKind().String(), Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()}
		if st, ok := e.Object.Object["status"].(map[string]any); ok {
			o.Phase, _ = st["phase"].(string)
		}
		if snapshot.IsSecret(e.Object) {
			o.Secret = true
			for _, f := range []string{"data", "stringData"} {
				m, _ := e.Object.Object[f].(map[string]any)
				for k := range m {
					o.SecretKeys = append(o.SecretKeys, k)
				}
			}
			slices.Sort(o.SecretKeys)
		}
		d.Objects = append(d.Objects, o)
	}
	if with := r.URL.Query().Get("diff"); with == liveDiff {
		d.DiffWith = "the live cluster " + snap.Spec.Cluster
		if s.opts.Live == nil {
			d.DiffError = "this dashboard cannot read member clusters: compare with rewind snapshot diff " + snap.Name + " --live"
		} else {
			lctx, cancel := context.WithTimeout(ctx, time.Minute)
			to, err := s.opts.Live(lctx, snap, hdr)
			cancel()
			if err != nil {
				d.DiffError = fmt.Sprintf("capturing %s now: %v", snap.Spec.Cluster, err)
			} else {
				d.Changes = redactedChanges(entries, to)
			}
		}
	} else if with != "" {
		d.DiffWith = with
		other := &v1alpha1.Snapshot{}
		if err := s.cache.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: with}, other); err != nil {
			d.DiffError = fmt.Sprintf("snapshot %q: %v", with, err)
		} else if _, to, err := hub.Load(ctx, other); err != nil {
			d.DiffError = err.Error()
		} else {
			d.Changes = redactedChanges(entries, to)
		}
	}
	s.render(w, r, http.StatusOK, "snapshot", "Snapshot "+name, "", d)
}

// liveDiff is the diff form's value for the live cluster (no snapshot name has a colon).
const liveDiff = ":live"

// redactedChanges is snapshot.Diff with every value of a Secret redacted, not only its data:
// an annotation such as kubectl's last-applied-configuration holds the values too.
func redactedChanges(from, to []snapshot.Entry) []changeView {
	secret := map[string]bool{}
	for _, es := range [][]snapshot.Entry{from, to} {
		for _, e := range es {
			if snapshot.IsSecret(e.Object) {
				secret[snapshot.KeyOf(e).String()] = true
			}
		}
	}
	var out []changeView
	for _, ch := range snapshot.Diff(from, to) {
		c := changeView{Type: ch.Type, Object: ch.Object, Fields: ch.Fields}
		if secret[ch.Object] {
			c.Fields = make([]snapshot.FieldChange, len(ch.Fields))
			for i, f := range ch.Fields {
				c.Fields[i] = snapshot.FieldChange{Path: f.Path, Old: "<redacted>", New: "<redacted>"}
			}
		}
		out = append(out, c)
	}
	return out
}

func (s *Server) actionsEnabled() bool {
	return s.opts.Actions != nil || (s.opts.Auth != nil && s.opts.UserActions != nil)
}

// actionsFor returns the actions of a request: with Auth and UserActions, run with the
// signed-in user's own token.
func (s *Server) actionsFor(r *http.Request) (Actions, error) {
	if s.opts.Auth != nil && s.opts.UserActions != nil {
		sess := sessionFrom(r.Context())
		if sess == nil {
			return nil, errors.New("no signed-in user")
		}
		cfg := rest.AnonymousClientConfig(s.cfg)
		cfg.BearerToken = sess.token
		return s.opts.UserActions(cfg)
	}
	return s.opts.Actions, nil
}

// actionToken is the token a page sends with its actions, so that no other site's page can
// make them (CSRF): the server's own random one, or with Auth one derived from the user's
// bearer token (the same on every replica of the controller).
func (s *Server) actionToken(r *http.Request) string {
	if s.opts.Auth != nil {
		if sess := sessionFrom(r.Context()); sess != nil {
			return sess.CSRF
		}
		return ""
	}
	return s.token
}

// action runs an action a person confirmed on a Rollout page.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	if !s.actionsEnabled() {
		http.Error(w, "actions are disabled: start the dashboard with --enable-actions", http.StatusForbidden)
		return
	}
	if want := s.actionToken(r); want == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Rewind-Token")), []byte(want)) != 1 {
		http.Error(w, "missing or wrong action token: reload the page", http.StatusForbidden)
		return
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if o := r.Header.Get("Origin"); o != "" && o != scheme+r.Host {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	ctx, ns, name := r.Context(), s.opts.Namespace, r.PathValue("name")
	acts, err := s.actionsFor(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var msg string
	switch r.PathValue("action") {
	case "approve":
		msg, err = acts.Approve(ctx, ns, name)
	case "pause":
		msg, err = acts.Pause(ctx, ns, name, true)
	case "resume":
		msg, err = acts.Pause(ctx, ns, name, false)
	case "rollback":
		reason := strings.TrimSpace(r.FormValue("reason"))
		if reason == "" {
			reason = "requested from the rewind dashboard"
		}
		msg, err = acts.Rollback(ctx, ns, name, reason)
	case "retry":
		msg, err = acts.Retry(ctx, ns, name)
	default:
		http.Error(w, "unknown action", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusConflict
		if apierrors.IsForbidden(err) {
			code = http.StatusForbidden
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}
