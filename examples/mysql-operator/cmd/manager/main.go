// Command manager is the sample MySQLCluster operator's binary, as its container image would run
// it: `manager --version 3.0.0 [--fail-reconcile] [--webhook-port 9443 --cert-dir DIR]`.
// On rewind's testbed, pods run nothing; the testbed's runner runs the same code in process.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
)

func main() {
	fs := pflag.NewFlagSet("manager", pflag.ExitOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true // the rest are the operator's own flags
	version := fs.String("version", "3.0.0", "which release to run: 1.0.0, 2.0.0 or 3.0.0")
	_ = fs.Parse(os.Args[1:])
	b, err := operator.BuildFor(*version)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o := operator.Options{Build: b, WebhookPort: 9443, Logger: zap.New()}
	if err := o.ParseArgs(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mgr, err := operator.NewManager(ctrl.GetConfigOrDie(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
