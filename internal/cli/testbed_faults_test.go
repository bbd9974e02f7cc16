package cli

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// TestTestbedFaultFlags checks that `testbed up`'s fault flags make the faults they say, and
// that what `up` passes to the detached proxy (ProxyConfig.Args) reads back the same in
// `testbed proxy`.
func TestTestbedFaultFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string // flags of `testbed up`
		want testbed.Faults
		// wantErr says the flags must be refused.
		wantErr bool
	}{
		{
			name: "resets with the default refusal",
			args: []string{"--member-reset-every", "5s"},
			want: testbed.Faults{ResetEvery: 5 * time.Second, RefuseFor: testbed.DefaultRefuseFor,
				HTTP: testbed.HTTPFaults{Codes: testbed.DefaultHTTPFaultCodes, RetryAfter: time.Second}},
		},
		{
			name: "resets without refusal",
			args: []string{"--member-reset-every", "5s", "--member-refuse-for", "0"},
			want: testbed.Faults{ResetEvery: 5 * time.Second, RefuseFor: -1,
				HTTP: testbed.HTTPFaults{Codes: testbed.DefaultHTTPFaultCodes, RetryAfter: time.Second}},
		},
		{
			name: "HTTP faults narrowed down",
			args: []string{"--member-http-faults", "0.25", "--member-http-fault-codes", "429,502", "--member-http-retry-after", "2s",
				"--member-http-faults-mutating-only", "--member-http-fault-path", "/apis/apps/", "--member-http-fault-path", "/api/v1/"},
			want: testbed.Faults{RefuseFor: testbed.DefaultRefuseFor, HTTP: testbed.HTTPFaults{
				Fraction: 0.25, Codes: []int{429, 502}, RetryAfter: 2 * time.Second, MutatingOnly: true,
				PathPrefixes: []string{"/apis/apps/", "/api/v1/"},
			}},
		},
		{name: "fraction above 1", args: []string{"--member-http-faults", "2"}, wantErr: true},
		{name: "a 404 is no fault", args: []string{"--member-http-faults", "0.1", "--member-http-fault-codes", "404"}, wantErr: true},
		{name: "negative refusal", args: []string{"--member-reset-every", "1s", "--member-refuse-for", "-1s"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var up faultFlags
			fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
			up.bind(fs, "member-")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := up.faults()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("%v: want an error, got %+v", tc.args, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("faults:\n got %+v\nwant %+v", got, tc.want)
			}
			// Through the detached proxy's command line.
			cfg := testbed.ProxyConfig{Latency: 25 * time.Millisecond, Faults: got,
				Routes:   []testbed.ProxyRoute{{Listen: "127.0.0.1:1", Target: "127.0.0.1:2"}},
				CertFile: "/tb/pki/member-proxy.crt", KeyFile: "/tb/pki/member-proxy.key", CAFile: "/tb/pki/ca.crt"}
			var pf proxyFlags
			pfs := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
			pf.bind(pfs)
			if err := pfs.Parse(cfg.Args()); err != nil {
				t.Fatalf("testbed proxy %v: %v", cfg.Args(), err)
			}
			back, err := pf.config()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, cfg) {
				t.Fatalf("the proxy read %v as\n %+v\nwant %+v", cfg.Args(), back, cfg)
			}
		})
	}
}
