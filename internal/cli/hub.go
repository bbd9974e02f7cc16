package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// hubScheme is what the CLI reads and writes in the hub.
var hubScheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(hubScheme)
	_ = v1alpha1.AddToScheme(hubScheme)
}

// hubFlags are the kubectl-like flags that say which hub cluster and namespace to use.
type hubFlags struct {
	kubeconfig, context, namespace string
}

func (h *hubFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&h.kubeconfig, "kubeconfig", "", "kubeconfig of the hub cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&h.context, "context", "", "kubeconfig context of the hub to use")
	f.StringVarP(&h.namespace, "namespace", "n", "", "hub namespace of releases, rollouts and snapshots (default: the context's namespace, else default)")
}

func (h *hubFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if h.kubeconfig != "" {
		rules.ExplicitPath = h.kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: h.context})
}

// config returns the hub's client configuration.
func (h *hubFlags) config() (*rest.Config, error) {
	cfg, err := h.loader().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the hub kubeconfig (set --kubeconfig or $KUBECONFIG): %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// client returns a client for the hub.
func (h *hubFlags) client() (client.Client, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: hubScheme})
}

// ns returns the namespace to work in.
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
	if meta.IsNoMatchError(err) || strings.Contains(err.Error(), "the server could not find the requested resource") {
		return fmt.Errorf("the hub does not serve rewind.dev/v1alpha1: run `rewind install` against it first (%w)", err)
	}
	return err
}

// outputFlag adds -o/--output with the given formats.
func outputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// printStructured prints v as JSON or YAML; ok is false for the table format.
func printStructured(out io.Writer, format string, v any) (ok bool, err error) {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintln(out, string(b))
		return true, err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = out.Write(b)
		return true, err
	case "table", "":
		return false, nil
	}
	return true, fmt.Errorf("--output %q is not supported: use table, json or yaml", format)
}
