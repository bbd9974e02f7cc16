package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/dashboard"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

func newDashboardCommand(h *hubFlags) *cobra.Command {
	var address string
	var enableActions bool
	cmd := &cobra.Command{
		Use:   "dashboard [--address 127.0.0.1:3100] [--enable-actions]",
		Short: "Serve a live web dashboard of the namespace's rollouts, members and snapshots",
		Long: `Serves a web dashboard of the hub namespace, read with your kubeconfig as every other command:
the Rollouts with their phase, release and clusters done; per Rollout a grid of waves and
clusters (phase, step, message, snapshot) that updates live from watches on the hub; its
revision history with who rolled back (a person or the failure policy) and why; the member
clusters with their reachability, what their targets say they run and, on request, their
live installed-version record and drift; a snapshot's objects and its diff against another
snapshot. Secret values are never shown.

It is read-only unless --enable-actions is given: then each Rollout page has buttons to
approve, pause, resume, roll back and retry, each asking for confirmation and running what the
commands of the same names run. It listens on 127.0.0.1 only by default; it has no login of its
own (whoever reaches it acts with your credentials), so actions are refused on any other
address.`,
		Example: `  rewind dashboard
  rewind dashboard -n team-a --address 127.0.0.1:8080
  rewind dashboard --enable-actions`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return fmt.Errorf("--address %q: %w", address, err)
			}
			loopback := host == "localhost"
			if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
				loopback = true
			}
			if enableActions && !loopback {
				return fmt.Errorf("--enable-actions is refused on --address %s: the dashboard has no login, so anyone reaching it would act with your credentials; serve it on 127.0.0.1", address)
			}
			cfg, err := h.config()
			if err != nil {
				return err
			}
			srv, err := NewDashboard(cfg, h.ns(), h.prog, enableActions)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if err := srv.Start(ctx); err != nil {
				return hubError(err)
			}
			ln, err := net.Listen("tcp", address)
			if err != nil {
				return err
			}
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
			mode := "read-only"
			if enableActions {
				mode = "actions enabled"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rewind dashboard of namespace %s (%s): http://%s\n", h.ns(), mode, ln.Addr())
			if !loopback {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s is not a loopback address: anyone who reaches it reads the hub with your credentials\n", address)
			}
			go func() {
				<-ctx.Done()
				sd, c := context.WithTimeout(context.Background(), 5*time.Second)
				defer c()
				_ = hs.Shutdown(sd)
			}()
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:3100", "host:port to serve on")
	cmd.Flags().BoolVar(&enableActions, "enable-actions", false, "show the approve, pause, resume, rollback and retry buttons (each asks for confirmation)")
	return cmd
}

// NewDashboard returns the dashboard of hub namespace ns; with actions its buttons run the
// same code as `rewind rollout approve|pause|resume`, `rewind rollback` and `rewind retry`.
// prog is how the user runs rewind (for hints in messages).
func NewDashboard(cfg *rest.Config, ns, prog string, actions bool) (*dashboard.Server, error) {
	c, err := client.New(cfg, client.Options{Scheme: hubScheme})
	if err != nil {
		return nil, err
	}
	opts := dashboard.Options{Namespace: ns, Check: func(ctx context.Context, operator, release string) ([]dashboard.MemberCheck, error) {
		res, err := checkClusters(ctx, c, ns, operator, release, "")
		if err != nil {
			return nil, err
		}
		out := make([]dashboard.MemberCheck, 0, len(res))
		for _, r := range res {
			out = append(out, dashboard.MemberCheck{Cluster: r.Cluster, Status: r.Status, InstalledRelease: r.InstalledRelease, ExpectedRelease: r.ExpectedRelease, Reasons: r.Reasons})
		}
		return out, nil
	}}
	opts.Live = func(ctx context.Context, snap *v1alpha1.Snapshot, hdr snapshot.Header) ([]snapshot.Entry, error) {
		return captureLive(ctx, c, &hubFlags{prog: prog, namespace: ns}, snap, hdr)
	}
	if actions {
		opts.Actions = dashboard.ClientActions(c, prog)
	}
	return dashboard.New(cfg, opts)
}
