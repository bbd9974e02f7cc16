package release

// InstallNamespace is the namespace an operator's release installs into: explicit when it
// is set, otherwise the default, the operator's name followed by -system (what rewind release
// create and the OperatorRelease controller render for, and what the CLI assumes of a member
// without an installed-version record).
func InstallNamespace(operator, explicit string) string {
	if explicit != "" {
		return explicit
	}
	return operator + "-system"
}
