package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
)

// hubScheme is what the CLI reads and writes in the hub.
var hubScheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(hubScheme)
	_ = v1alpha1.AddToScheme(hubScheme)
}

// hubFlags are the kubectl-like flags that say which hub cluster and namespace to use, and
// how the user runs rewind.
type hubFlags struct {
	kubeconfig, context, namespace string
	// prog is what the user types to run rewind: "rewind", or "kubectl rewind" when it runs as
	// a kubectl plugin. Hints in errors and messages use it.
	prog string
}

func (h *hubFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&h.kubeconfig, "kubeconfig", "", "kubeconfig of the hub cluster (default: the files in $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&h.context, "context", "", "kubeconfig context of the hub to use (default: the current context)")
	f.StringVarP(&h.namespace, "namespace", "n", "", "hub namespace of releases, rollouts and snapshots (default: the context's namespace, else default)")
	_ = cmd.RegisterFlagCompletionFunc("context", h.completeContexts)
	_ = cmd.RegisterFlagCompletionFunc("namespace", h.completeNamespaces)
}

// loader resolves the hub kubeconfig as kubectl does: --kubeconfig alone when given, else
// every file of $KUBECONFIG merged (the first file that sets a value wins), else
// ~/.kube/config, else the in-cluster service account; --context picks the context.
func (h *hubFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = h.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: h.context}
	overrides.Context.Namespace = h.namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// config returns the hub's client configuration for a person's command: a blip of the way to
// the hub (a reset, a 429 or 5xx of an API server restarting behind its load balancer) is
// sent again, as the agent's requests are, and does not fail the command.
func (h *hubFlags) config() (*rest.Config, error) {
	cfg, err := h.managerConfig()
	if err != nil {
		return nil, err
	}
	return member.WithRetries(cfg, "hub"), nil
}

// managerConfig is the hub's client configuration as the kubeconfig gives it, for `rewind
// controller`: the manager is the one rewind-controller runs, whose reconcilers requeue what
// a fault failed.
func (h *hubFlags) managerConfig() (*rest.Config, error) {
	loader := h.loader()
	if h.context != "" {
		// clientcmd only says `context "x" does not exist`; name the flag and the choices.
		raw, err := loader.RawConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the hub kubeconfig (set --kubeconfig or $KUBECONFIG): %w", err)
		}
		if _, ok := raw.Contexts[h.context]; !ok {
			return nil, fmt.Errorf("--context %q is not in the kubeconfig %s; its contexts: %s",
				h.context, h.kubeconfigSource(), dash(strings.Join(sortedKeys(raw.Contexts), ", ")))
		}
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the hub kubeconfig %s (set --kubeconfig or $KUBECONFIG): %w", h.kubeconfigSource(), err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// kubeconfigSource says which files the hub kubeconfig is read from.
func (h *hubFlags) kubeconfigSource() string {
	if h.kubeconfig != "" {
		return h.kubeconfig
	}
	return strings.Join(clientcmd.NewDefaultClientConfigLoadingRules().GetLoadingPrecedence(), string(filepath.ListSeparator))
}

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// client returns a client for the hub.
func (h *hubFlags) client() (client.Client, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: hubScheme})
	if err != nil {
		return nil, err
	}
	// A create or an update whose answer a blip lost finds its write done (the transport
	// sends a PUT again, not a POST).
	return fault.KnowsItsWrites(c), nil
}

// ns returns the namespace to work in: -n, else the context's namespace, else default.
func (h *hubFlags) ns() string {
	if h.namespace != "" {
		return h.namespace
	}
	if ns, _, err := h.loader().Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

// hubError turns a "no kind registered / no match" error for rewind.dev into advice.
func hubError(err error) error {
	if err == nil {
		return nil
	}
	if isMissingAPI(err) {
		return fmt.Errorf("the hub does not serve rewind.dev/v1alpha1: run `rewind install` against it first (%w)", err)
	}
	if ns, ok := missingNamespace(err); ok {
		return fmt.Errorf("namespace %q does not exist in the hub: create it (kubectl create namespace %s) and let the controller work there (rewind namespace enable %s), or pick another with -n", ns, ns, ns)
	}
	return err
}

// missingNamespace says whether err is the API server's refusal of an object in a namespace
// that does not exist, and which.
func missingNamespace(err error) (string, bool) {
	var se apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &se) {
		return "", false
	}
	d := se.Status().Details
	if d == nil || d.Kind != "namespaces" || d.Group != "" || d.Name == "" {
		return "", false
	}
	return d.Name, true
}

// isMissingAPI says the hub does not serve the resource at all (the CRDs are not installed):
// the REST mapper knows no such kind, or the hub answered 404 without an API status (its
// answer to a path it does not serve, which client-go marks with a cause of type
// UnexpectedServerResponse; a missing object's 404 is a status that names it). By type, not
// by the message's text, as before.
//
// A discovery that failed for a group version with anything but a 404 (a 503 of a hub
// restarting, a reset) is a fault, even when another version's 404 made it a no-match too.
// controller-runtime v0.25's mapper does not build such a mixed error (it skips a version's
// 404, and its aggregated discovery records only no-matches): this keeps the advice to install
// rewind from a hub that had a fault if a version of it does (ErrResourceDiscoveryFailed
// turns a 404 into a no-match for that purpose).
func isMissingAPI(err error) bool {
	var failed *apiutil.ErrResourceDiscoveryFailed
	if errors.As(err, &failed) {
		for _, gvErr := range *failed {
			if !apierrors.IsNotFound(gvErr) && !meta.IsNoMatchError(gvErr) {
				return false
			}
		}
	}
	if meta.IsNoMatchError(err) {
		return true
	}
	var se apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &se) || se.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(se.Status().Details.Causes, func(c metav1.StatusCause) bool {
		return c.Type == metav1.CauseTypeUnexpectedServerResponse
	})
}

// getHubObject reads a hub object. When it does not exist the error names its kind, name and
// namespace and the command that lists them, e.g.
// `snapshot "nope" not found in namespace team-a (list them with: rewind snapshot list -n team-a)`.
func getHubObject(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object, kind, listCmd string) error {
	err := c.Get(ctx, key, obj)
	if err != nil && apierrors.IsNotFound(err) && !isMissingAPI(err) {
		return notFoundError(kind, key, listCmd)
	}
	return hubError(err)
}

func notFoundError(kind string, key client.ObjectKey, listCmd string) error {
	if key.Namespace == "" {
		return fmt.Errorf("%s %q not found (list them with: %s)", kind, key.Name, listCmd)
	}
	return fmt.Errorf("%s %q not found in namespace %s (list them with: %s)", kind, key.Name, key.Namespace, listCmd)
}
