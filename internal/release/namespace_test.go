package release

import "testing"

func TestInstallNamespace(t *testing.T) {
	for _, tc := range []struct {
		// operator and explicit as passed; want is the namespace.
		operator, explicit, want string
	}{
		{operator: "mysql-operator", want: "mysql-operator-system"},
		{operator: "mysql-operator", explicit: "databases", want: "databases"},
	} {
		if got := InstallNamespace(tc.operator, tc.explicit); got != tc.want {
			t.Errorf("InstallNamespace(%q, %q) = %q, want %q", tc.operator, tc.explicit, got, tc.want)
		}
	}
}
