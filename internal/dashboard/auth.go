package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

// Auth makes the dashboard authenticate every request through the hub, as the controller
// serves it: the caller's bearer token is checked with a TokenReview, and each page and
// action is authorised for the token's user with a SubjectAccessReview. Nothing is served
// anonymously: no token or an invalid one gets 401, a user without the rights 403.
//
// A browser signs in on /login (or opens a link with ?token=): the token is kept in an
// HttpOnly, SameSite=Strict cookie (Secure over TLS) and leaves the address at once. The
// token is never logged nor put in a page.
type Auth struct {
	// Client asks the hub: its identity needs create on tokenreviews.authentication.k8s.io and
	// subjectaccessreviews.authorization.k8s.io (the controller's ClusterRole has both).
	Client kubernetes.Interface
	// Tries is how many times a review that meets a fault (a reset connection, a timeout, a
	// 429 or 5xx) is sent before the request gets 503 (default 5).
	Tries int
	// TTL is how long a review's answer is reused for the same token (default 10s).
	TTL time.Duration
}

// cookieName holds a browser's token.
const cookieName = "rewind-dashboard-token"

// access is what a request needs: a verb on a rewind.dev resource, in the namespace shown
// (namespaced) or cluster-wide.
type access struct {
	Verb, Resource string
	Namespaced     bool
}

func (a access) String() string {
	if a.Namespaced {
		return fmt.Sprintf("%s %s.%s", a.Verb, a.Resource, v1alpha1.GroupVersion.Group)
	}
	return fmt.Sprintf("%s %s.%s (cluster-wide)", a.Verb, a.Resource, v1alpha1.GroupVersion.Group)
}

// View is what every page needs; each route adds its own.
var (
	viewRollouts = []access{{"get", "rollouts", true}, {"list", "rollouts", true}}
	viewMembers  = access{"list", "memberclusters", false}
	viewSnapshot = access{"get", "snapshots", true}
	// The actions write the Rollout as `rewind rollout pause` does (an update; approving
	// held clusters also patches their RolloutTargets, which the hub checks itself).
	actOnRollout = access{"update", "rollouts", true}
)

// needs returns what a request must be allowed (nil: served to anyone, e.g. the stylesheet).
func needs(r *http.Request) []access {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/static/"), p == "/healthz", p == "/login", p == "/logout":
		return nil
	case p == "/members":
		return append(viewRollouts[:len(viewRollouts):len(viewRollouts)], viewMembers)
	case strings.HasPrefix(p, "/snapshots/"):
		return append(viewRollouts[:len(viewRollouts):len(viewRollouts)], viewSnapshot)
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/rollouts/") && strings.Contains(p, "/actions/"):
		return append(viewRollouts[:len(viewRollouts):len(viewRollouts)], actOnRollout)
	}
	return viewRollouts
}

// reviewed is a review's answer, kept for TTL.
type reviewed struct {
	user    authenticationv1.UserInfo
	ok      bool
	reason  string
	expires time.Time
}

// authCache keeps reviews' answers by a hash of the token (never the token itself).
type authCache struct {
	mu sync.Mutex
	m  map[string]reviewed
}

func (c *authCache) get(key string) (reviewed, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	if !ok || time.Now().After(v.expires) {
		return reviewed{}, false
	}
	return v, true
}

func (c *authCache) put(key string, v reviewed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 10000 {
		c.m = map[string]reviewed{}
	}
	c.m[key] = v
}

type userKey struct{}

// sessionOf is what the authentication middleware found about a request.
type session struct {
	User authenticationv1.UserInfo
	// CSRF is the action token of the user's pages: a hash of their bearer token, the same on
	// every replica of the controller, and unknown to another site.
	CSRF string
	// token is the user's bearer token, for the actions run as the user. Never logged.
	token string
}

func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(userKey{}).(*session)
	return s
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte("rewind-dashboard\x00" + tok))
	return hex.EncodeToString(h[:])
}

// errReview is a review the hub could not answer (it kept meeting faults).
var errReview = errors.New("the hub could not review the request")

// authenticate returns the user of token, or ok=false when the hub says the token is not
// valid.
func (s *Server) authenticate(ctx context.Context, token string) (reviewed, error) {
	a := s.opts.Auth
	key := "tr/" + hashToken(token)
	if v, ok := s.auth.get(key); ok {
		return v, nil
	}
	var res *authenticationv1.TokenReview
	err := fault.Retry(ctx, a.Tries, func() error {
		var err error
		res, err = a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return reviewed{}, fmt.Errorf("%w: TokenReview: %w", errReview, err)
	}
	v := reviewed{user: res.Status.User, ok: res.Status.Authenticated, reason: res.Status.Error, expires: time.Now().Add(a.TTL)}
	s.auth.put(key, v)
	return v, nil
}

// authorize says whether user may do what a needs in the dashboard's namespace.
func (s *Server) authorize(ctx context.Context, token string, user authenticationv1.UserInfo, a access) (bool, error) {
	key := "sar/" + hashToken(token) + "/" + a.String()
	if v, ok := s.auth.get(key); ok {
		return v.ok, nil
	}
	attrs := &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: v1alpha1.GroupVersion.Group, Resource: a.Resource}
	if a.Namespaced {
		attrs.Namespace = s.opts.Namespace
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: attrs, User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra}}
	var res *authorizationv1.SubjectAccessReview
	err := fault.Retry(ctx, s.opts.Auth.Tries, func() error {
		var err error
		res, err = s.opts.Auth.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%w: SubjectAccessReview: %w", errReview, err)
	}
	s.auth.put(key, reviewed{ok: res.Status.Allowed, expires: time.Now().Add(s.opts.Auth.TTL)})
	return res.Status.Allowed, nil
}

// tokenOf returns the request's token: its Authorization header, else the cookie.
func tokenOf(r *http.Request) (tok string, fromCookie bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t), false
		}
		return "", false
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value, true
	}
	return "", false
}

func wantsHTML(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// requireAuth wraps the dashboard's routes with authentication and authorisation.
func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			s.login(w, r)
			return
		}
		if r.URL.Path == "/logout" {
			s.logout(w, r)
			return
		}
		need := needs(r)
		if need == nil {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		// A link with ?token=: sign in with it and take it out of the address at once.
		if q := r.URL.Query(); r.Method == http.MethodGet && q.Has("token") {
			tok := q.Get("token")
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			s.signIn(w, r, tok, u.RequestURI())
			return
		}
		tok, fromCookie := tokenOf(r)
		if tok == "" {
			s.unauthorized(w, r, "sign in with a bearer token of the hub")
			return
		}
		rev, err := s.authenticate(ctx, tok)
		if err != nil {
			http.Error(w, "the hub does not answer the review of your token now; try again in a moment", http.StatusServiceUnavailable)
			return
		}
		if !rev.ok {
			if fromCookie {
				clearCookie(w, r)
			}
			s.unauthorized(w, r, "the hub does not accept this token (expired, revoked or not one of its tokens)")
			return
		}
		for _, a := range need {
			ok, err := s.authorize(ctx, tok, rev.user, a)
			if err != nil {
				http.Error(w, "the hub does not answer the review of your access now; try again in a moment", http.StatusServiceUnavailable)
				return
			}
			if !ok {
				s.forbidden(w, r, rev.user.Username, a)
				return
			}
		}
		sess := &session{User: rev.user, CSRF: hashToken("csrf\x00" + tok), token: tok}
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, userKey{}, sess)))
	})
}

// signIn reviews tok; when the hub accepts it, it is set in the cookie and the browser sent
// to next (a path of this dashboard).
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, tok, next string) {
	tok = strings.TrimSpace(tok)
	if tok == "" {
		s.unauthorized(w, r, "the token is empty: paste a bearer token of the hub")
		return
	}
	rev, err := s.authenticate(r.Context(), tok)
	if err != nil {
		http.Error(w, "the hub does not answer the review of your token now; try again in a moment", http.StatusServiceUnavailable)
		return
	}
	if !rev.ok {
		s.unauthorized(w, r, "the hub does not accept this token (expired, revoked or not one of its tokens)")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/login") {
		next = "/"
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// login shows the sign-in form (GET) or signs in with the token posted.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.renderLogin(w, r, http.StatusOK, "")
	case http.MethodPost:
		s.signIn(w, r, r.PostFormValue("token"), r.PostFormValue("next"))
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

type loginData struct {
	Next, Error string
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	next := r.URL.RequestURI()
	if r.URL.Path == "/login" {
		next = r.URL.Query().Get("next")
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="rewind dashboard"`)
	s.render(w, r, status, "login", "Sign in", "", loginData{Next: next, Error: msg})
}

// unauthorized answers 401: a sign-in form to a browser, a sentence to anything else.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, why string) {
	if wantsHTML(r) || r.URL.Path == "/login" {
		s.renderLogin(w, r, http.StatusUnauthorized, why)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="rewind dashboard"`)
	http.Error(w, "401 unauthorized: "+why, http.StatusUnauthorized)
}

// forbidden answers 403, naming the user and the right missing.
func (s *Server) forbidden(w http.ResponseWriter, r *http.Request, user string, a access) {
	msg := fmt.Sprintf("%s may not %s in namespace %s of the hub: ask for a Role that allows it", user, a, s.opts.Namespace)
	if !a.Namespaced {
		msg = fmt.Sprintf("%s may not %s on the hub: ask for a ClusterRole that allows it", user, a)
	}
	if wantsHTML(r) {
		s.render(w, r, http.StatusForbidden, "denied", "Not allowed", "", msg)
		return
	}
	http.Error(w, "403 forbidden: "+msg, http.StatusForbidden)
}
