// Command kwokstages prints the kwok configuration (Stage documents) the testbed runs kwok
// with: fast node initialization, node heartbeats and fast pod lifecycle. The YAML comes
// from the kwok module itself, so it always matches the kwok version that is built.
package main

import (
	"fmt"
	"os"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	"sigs.k8s.io/kwok/kustomize/stage/node/heartbeat"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	docs := []string{
		nodefast.DefaultNodeInit,
		heartbeat.DefaultNodeHeartbeat,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, d := range docs {
		if i > 0 {
			fmt.Fprintln(os.Stdout, "---")
		}
		fmt.Fprintln(os.Stdout, strings.TrimSpace(d))
	}
}
