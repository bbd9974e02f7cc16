package docs_test

// Every error and condition message that tells a person what to do names a fix the docs
// describe. The fixes are read from the code itself: every string literal of the packages
// under api/, cmd/ and internal/ (test files excluded), concatenations and format verbs
// included. Three kinds of fix are checked mechanically:
//
//   - a rewind command line (`rewind clusters join NAME`, "(rewind retry %s)", "run rewind
//     ...", "kubectl rewind ..."): its subcommands exist in the real cobra tree, its flags are
//     flags of that command, its arguments are as many as the command takes, and the docs
//     name the command;
//   - a field path (`fix spec.kubeconfigSecretRef`, "spec.waves[%d].clusters"): it exists in
//     the schema of a rewind CRD (config/crd/bases), whose every field the generated API
//     reference documents;
//   - a document ("see docs/install.md#permissions", "README, Quick start"): the file exists
//     and has that section;
//   - a condition reason the controller sets (every Reason constant of api/v1alpha1 and
//     internal/controller): docs/operations.md's troubleshooting has a row for it with what
//     to do, or sends the reader to a document that has one.
//
// These tests need no testbed: they run in `make test-unit` too.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/internal/cli"
)

// message is one string of the code, with format verbs and the non-literal parts of a
// concatenation replaced by X.
type message struct {
	pos  string // file:line
	text string
}

// fmtVerb matches a format verb of package fmt (but not "%%").
var fmtVerb = regexp.MustCompile(`%[-+# 0-9.*\[\]]*[a-zA-Z]`)

// repoRoot is the repository's root: the parent of docs/, where go test runs this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository's root is not the parent of docs/: %v", err)
	}
	return root
}

// messages returns the string literals of every non-test Go file under the dirs (relative to
// root). The literals of a concatenation form one message; the fields Use, Short and
// Example of a cobra.Command are left out (the usage tests check those).
func messages(root string, dirs ...string) ([]message, error) {
	var out []message
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			ms, err := fileMessages(rel, src)
			out = append(out, ms...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// usageField names the fields of a cobra.Command that hold usage, not messages.
var usageField = map[string]bool{"Use": true, "Short": true, "Example": true}

// fileMessages returns the messages of one Go source file.
func fileMessages(name string, src []byte) ([]message, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []message
	done := map[ast.Node]bool{}
	add := func(n ast.Node, text string) {
		p := fset.Position(n.Pos())
		out = append(out, message{pos: fmt.Sprintf("%s:%d", name, p.Line), text: fmtVerb.ReplaceAllString(text, "X")})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil || done[n] {
			return false
		}
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && usageField[sel.Sel.Name] && i < len(n.Rhs) {
					done[n.Rhs[i]] = true
				}
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && usageField[k.Name] {
				return false
			}
		case *ast.BinaryExpr:
			if n.Op != token.ADD {
				return true
			}
			var parts []string
			literal := false
			var flatten func(e ast.Expr)
			flatten = func(e ast.Expr) {
				switch e := e.(type) {
				case *ast.BinaryExpr:
					if e.Op == token.ADD {
						done[e] = true
						flatten(e.X)
						flatten(e.Y)
						return
					}
				case *ast.ParenExpr:
					flatten(e.X)
					return
				case *ast.BasicLit:
					if s, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING {
						done[e] = true
						literal = true
						parts = append(parts, s)
						return
					}
				}
				parts = append(parts, "X")
			}
			flatten(n)
			if literal {
				add(n, strings.Join(parts, ""))
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				if s, err := strconv.Unquote(n.Value); err == nil {
					add(n, s)
				}
			}
		}
		return true
	})
	return out, nil
}

// A mention of a rewind command line in a message.
type mention struct {
	path   []string // the subcommands, e.g. [clusters join]
	flags  []string // the flags named, but the hub flags every command has (-n, --kubeconfig, ...)
	strict bool     // written as a command to run (not a mention in prose)
}

var rewindWord = regexp.MustCompile(`\brewind `)

// stopWords end a command line written in a sentence ("run rewind clusters join X and ...").
var stopWords = map[string]bool{"or": true, "and": true, "on": true, "first": true, "again": true, "for": true,
	"then": true, "to": true, "in": true, "of": true, "is": true, "does": true, "not": true, "if": true, "until": true,
	"...": true, "—": true, "-": true}

// commandProblems checks every rewind command line that text mentions against the command
// tree root; it returns the mentions and what is wrong with them.
func commandProblems(root *cobra.Command, text string) ([]mention, []string) {
	var ms []mention
	var problems []string
	for _, loc := range rewindWord.FindAllStringIndex(text, -1) {
		before := text[:loc[0]]
		if strings.HasSuffix(before, "-") || strings.HasSuffix(before, "/") || strings.HasSuffix(before, ".") {
			continue // kubectl-rewind, a path
		}
		prevChar := ""
		if before != "" {
			prevChar = before[len(before)-1:]
		}
		words := strings.Fields(before)
		prevWord := ""
		if len(words) > 0 {
			prevWord = strings.ToLower(strings.Trim(words[len(words)-1], ":`(\"'"))
		}
		if prevChar == " " && (prevWord == "the" || prevWord == "a" || prevWord == "an") {
			continue // the rewind controller, a rewind snapshot payload: a noun
		}
		rest := text[loc[1]:]
		if i := strings.IndexAny(rest, "`();,?\n\"'"); i >= 0 {
			rest = rest[:i]
		}
		var toks []string
		for _, w := range strings.Fields(rest) {
			if stopWords[w] {
				break
			}
			last := strings.HasSuffix(w, ".") || strings.HasSuffix(w, ":")
			if w = strings.TrimRight(w, ".:"); w != "" {
				toks = append(toks, w)
			}
			if last {
				break
			}
		}
		strict := strings.ContainsAny(prevChar, "`($") || prevWord == "run" || prevWord == "with" ||
			prevWord == "use" || prevWord == "kubectl" || prevWord == "try"
		for _, w := range toks {
			strict = strict || strings.HasPrefix(w, "-")
		}
		cmd := root
		m := mention{strict: strict}
		i := 0
		for ; i < len(toks); i++ {
			sub := subcommand(cmd, toks[i])
			if sub == nil {
				break
			}
			cmd = sub
			m.path = append(m.path, toks[i])
		}
		quoted := "rewind " + strings.Join(toks, " ")
		if len(m.path) == 0 {
			if strict && len(toks) > 0 {
				problems = append(problems, fmt.Sprintf("%q: rewind has no command %q", quoted, toks[0]))
			}
			continue
		}
		if !strict {
			ms = append(ms, m)
			continue
		}
		if cmd.HasSubCommands() {
			if i < len(toks) && !strings.HasPrefix(toks[i], "-") {
				problems = append(problems, fmt.Sprintf("%q: %q has no subcommand %q", quoted, cmd.CommandPath(), toks[i]))
			} else {
				problems = append(problems, fmt.Sprintf("%q: %q is a group of commands, not one to run", quoted, cmd.CommandPath()))
			}
			ms = append(ms, m)
			continue
		}
		var args []string
		for ; i < len(toks); i++ {
			t := toks[i]
			if !strings.HasPrefix(t, "-") {
				args = append(args, t)
				continue
			}
			name, _, hasValue := strings.Cut(t, "=")
			needsValue := false
			for _, alt := range strings.Split(name, "/") {
				f := lookupFlag(cmd, alt)
				if f == nil {
					problems = append(problems, fmt.Sprintf("%q: %q has no flag %s", quoted, cmd.CommandPath(), alt))
					continue
				}
				if root.PersistentFlags().Lookup(f.Name) == nil {
					m.flags = append(m.flags, alt)
				}
				needsValue = needsValue || f.NoOptDefVal == ""
			}
			if needsValue && !hasValue && i+1 < len(toks) && !strings.HasPrefix(toks[i+1], "-") {
				i++ // the flag's value
			}
		}
		// "(rewind release create --chart, ...)" names a flag, not a whole command line.
		if len(args) > 0 && cmd.Args != nil {
			if err := cmd.Args(cmd, args); err != nil {
				problems = append(problems, fmt.Sprintf("%q: arguments %q: %v", quoted, args, err))
			}
		}
		ms = append(ms, m)
	}
	return ms, problems
}

// subcommand returns the subcommand of c named (or aliased) name, or nil.
func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || slices.Contains(sub.Aliases, name) {
			return sub
		}
	}
	return nil
}

// lookupFlag returns c's flag (its own or inherited) named like "--name" or "-n", or nil.
func lookupFlag(c *cobra.Command, name string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.InheritedFlags()} {
		var f *pflag.Flag
		if long, ok := strings.CutPrefix(name, "--"); ok {
			f = fs.Lookup(long)
		} else if short, ok := strings.CutPrefix(name, "-"); ok && len(short) == 1 {
			f = fs.ShorthandLookup(short)
		}
		if f != nil {
			return f
		}
	}
	return nil
}

// docsProblems says which commands and flags of the mentions no document names.
func docsProblems(ms []mention, docs string) []string {
	var problems []string
	for _, m := range ms {
		cmd := "rewind " + strings.Join(m.path, " ")
		if !strings.Contains(docs, cmd) {
			problems = append(problems, fmt.Sprintf("%q is named as a fix, but no document describes it", cmd))
			continue
		}
		for _, f := range m.flags {
			if !regexp.MustCompile(regexp.QuoteMeta(cmd) + `\b[^\n]*` + regexp.QuoteMeta(f) + `\b`).MatchString(docs) {
				problems = append(problems, fmt.Sprintf("%q is named as a fix, but no document shows %s with it", cmd+" "+f, f))
			}
		}
	}
	return problems
}

// specPath matches a field path of a spec: spec.waves[X].clusters, spec.source.oci.digest.
var specPath = regexp.MustCompile(`\bspec((?:\.[A-Za-z][A-Za-z0-9]*|\[[^\]\s]*\])+)`)

// foreignFields are the fields of other kinds' specs that messages name, by the file that
// names them; each must still be named there (TestErrorFixesForeignFieldsAreNamed).
var foreignFields = map[string][]string{
	// A CustomResourceDefinition's own spec (the release's CRDs the preflight checks read).
	"internal/preflight/crdsafety.go": {"spec.names", "spec.conversion"},
	"internal/preflight/objects.go":   {"spec.versions"},
	"internal/preflight/schema.go":    {"spec.versions"},
	// An OLM bundle's ClusterServiceVersion, and the Deployments it holds.
	"internal/release/bundle.go": {"spec.install", "spec.webhookdefinitions", "spec.customresourcedefinitions", "spec.selector"},
	// A Service's fields the API server assigns, which a restore leaves to it.
	"internal/restore/write.go": {"spec.clusterIPs", "spec.ipFamilies", "spec.loadBalancerClass"},
}

// schemas reads the openAPIV3Schema of every version of every CRD in dir.
func schemas(dir string) ([]*apiextensionsv1.JSONSchemaProps, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.JSONSchemaProps
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				out = append(out, v.Schema.OpenAPIV3Schema)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CRD schema in %s", dir)
	}
	return out, nil
}

// fieldExists says whether the path ("spec", "waves", "[]", "clusters") is a field of the
// schema; an index steps into an array's items, a map (additionalProperties) or an object
// that keeps unknown fields takes any name.
func fieldExists(s *apiextensionsv1.JSONSchemaProps, path []string) bool {
	for _, p := range path {
		if s == nil {
			return false
		}
		if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
			return true
		}
		if p == "[]" {
			if s.Items == nil || s.Items.Schema == nil {
				if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
					s = s.AdditionalProperties.Schema
					continue
				}
				return false
			}
			s = s.Items.Schema
			continue
		}
		if next, ok := s.Properties[p]; ok {
			s = &next
			continue
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			s = s.AdditionalProperties.Schema
			continue
		}
		return false
	}
	return true
}

// specPathProblems checks every spec field path text names against the schemas; paths of
// other kinds named by this file (foreign) are left alone.
func specPathProblems(text string, ss []*apiextensionsv1.JSONSchemaProps, foreign []string) (paths, problems []string) {
	for _, m := range specPath.FindAllStringSubmatch(text, -1) {
		path := []string{"spec"}
		for _, seg := range regexp.MustCompile(`\.[A-Za-z][A-Za-z0-9]*|\[[^\]]*\]`).FindAllString(m[1], -1) {
			if strings.HasPrefix(seg, "[") {
				path = append(path, "[]")
			} else {
				path = append(path, seg[1:])
			}
		}
		name := "spec" + m[1]
		if slices.ContainsFunc(foreign, func(f string) bool {
			return name == f || strings.HasPrefix(name, f+".") || strings.HasPrefix(name, f+"[")
		}) {
			continue
		}
		paths = append(paths, name)
		if !slices.ContainsFunc(ss, func(s *apiextensionsv1.JSONSchemaProps) bool { return fieldExists(s, path) }) {
			problems = append(problems, fmt.Sprintf("%s is not a field of any rewind CRD (config/crd/bases)", name))
		}
	}
	return paths, problems
}

// reasonConstants returns the values of the constants named Reason... in the non-test Go
// files under dirs, by value, with where each is declared.
func reasonConstants(root string, dirs ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if !strings.HasPrefix(n.Name, "Reason") || i >= len(vs.Values) {
							continue
						}
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							out[v] = fmt.Sprintf("%s (%s:%d)", n.Name, rel, fset.Position(n.Pos()).Line)
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// section returns the part of a Markdown document from the heading to the next heading of
// the same level (or the end).
func section(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+1+len(heading):]
	level := heading[:strings.Index(heading, " ")+1]
	if j := strings.Index(rest, "\n"+level); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// parenthesized is a part of a table cell in parentheses: "`Paused` (`Progressing`)" is a row
// for the reason Paused of the condition Progressing.
var parenthesized = regexp.MustCompile(`\([^)]*\)`)

var docLink = regexp.MustCompile(`\]\(([a-z0-9-]+\.md)(?:#[^)]*)?\)`)

// reasonProblem says what is missing for reason in the troubleshooting text: a table row
// whose first cell names it and whose last cell says what to do, or a paragraph that names
// it (a list item) and links to a document (read with readDoc) that names it too.
func reasonProblem(reason, troubleshooting string, readDoc func(name string) string) string {
	quoted := "`" + reason + "`"
	var paras []string
	for _, p := range strings.Split(troubleshooting, "\n\n") {
		paras = append(paras, regexp.MustCompile(`\n\s*[-*] `).Split(p, -1)...)
	}
	for _, para := range paras {
		if !strings.Contains(para, quoted) {
			continue
		}
		for _, line := range strings.Split(para, "\n") {
			if !strings.HasPrefix(line, "|") {
				continue
			}
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			last := strings.TrimSpace(cells[len(cells)-1])
			if len(cells) >= 2 && strings.Contains(parenthesized.ReplaceAllString(cells[0], ""), quoted) && last != "" && last != "-" {
				return ""
			}
		}
		if strings.HasPrefix(strings.TrimSpace(para), "|") {
			continue
		}
		for _, l := range docLink.FindAllStringSubmatch(para, -1) {
			if strings.Contains(readDoc(l[1]), quoted) {
				return ""
			}
		}
	}
	return fmt.Sprintf("reason %s: docs/operations.md's troubleshooting has no row for it with what to do (nor a link to a document that names it)", reason)
}

// docRef matches a reference to a document and, optionally, its section: "docs/install.md",
// "docs/install.md#permissions", "README, Permissions".
var docRef = regexp.MustCompile(`\b(README(?:\.md)?|docs/[a-z0-9-]+\.md)(#[a-z0-9-]+|, [A-Z][A-Za-z-]*)?`)

// slug is the anchor GitHub gives a heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// docRefProblems checks every document text refers to: the file exists (read returns false
// when it does not) and has the section named.
func docRefProblems(text string, read func(rel string) (string, bool)) []string {
	var problems []string
	for _, m := range docRef.FindAllStringSubmatch(text, -1) {
		file := m[1]
		if file == "README" {
			file = "README.md"
		}
		doc, ok := read(file)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s does not exist", file))
			continue
		}
		if m[2] == "" {
			continue
		}
		found := false
		for _, l := range strings.Split(doc, "\n") {
			h, ok := strings.CutPrefix(l, "#")
			if !ok {
				continue
			}
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			if anchor, ok := strings.CutPrefix(m[2], "#"); ok && slug(h) == anchor ||
				strings.HasPrefix(m[2], ", ") && slices.Contains(strings.Fields(h), strings.TrimPrefix(m[2], ", ")) {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s has no section %q", file, strings.TrimPrefix(m[2], ", ")))
		}
	}
	return problems
}

// fixTree is the command tree the fixes are checked against.
func fixTree() *cobra.Command { return cli.NewRootCommand() }

// allDocs is README.md and every document of docs/, one string.
func allDocs(t *testing.T, root string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(doc)
		b.WriteString("\n")
	}
	return b.String()
}

// TestErrorFixesAreRealCommands: every rewind command line a message names is a command of
// the CLI with its flags and arguments, and a document describes it.
func TestErrorFixesAreRealCommands(t *testing.T) {
	root := repoRoot(t)
	ms, err := messages(root, "api", "cmd", "internal")
	if err != nil {
		t.Fatal(err)
	}
	docs := allDocs(t, root)
	tree := fixTree()
	read := func(rel string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		return string(b), err == nil
	}
	checked := map[string]bool{}
	refs := 0
	for _, m := range ms {
		mentions, problems := commandProblems(tree, m.text)
		problems = append(problems, docsProblems(mentions, docs)...)
		problems = append(problems, docRefProblems(m.text, read)...)
		refs += len(docRef.FindAllString(m.text, -1))
		for _, p := range problems {
			t.Errorf("%s: %s\n\tin: %s", m.pos, p, m.text)
		}
		for _, mm := range mentions {
			checked["rewind "+strings.Join(append(mm.path, mm.flags...), " ")] = true
		}
	}
	// The check must see the fixes it is about: a handful that the code names today.
	for _, want := range []string{"rewind clusters join", "rewind retry", "rewind rollout approve", "rewind install --crds-only", "rewind testbed down --state-dir"} {
		if !checked[want] {
			t.Errorf("the messages no longer name %q, or the extraction misses it; checked: %v", want, sortedKeys(checked))
		}
	}
	t.Logf("%d command lines and %d references to documents checked in %d strings: %v", len(checked), refs, len(ms), sortedKeys(checked))
}

// TestErrorFixesAreRealFields: every spec field path a message names is a field of a rewind
// CRD (and so has its entry in docs/reference/api.md).
func TestErrorFixesAreRealFields(t *testing.T) {
	root := repoRoot(t)
	ms, err := messages(root, "api", "cmd", "internal")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := schemas(filepath.Join(root, "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	foreignSeen := map[string]bool{}
	for _, m := range ms {
		file, _, _ := strings.Cut(m.pos, ":")
		paths, problems := specPathProblems(m.text, ss, foreignFields[file])
		for _, p := range problems {
			t.Errorf("%s: %s\n\tin: %s", m.pos, p, m.text)
		}
		for _, p := range paths {
			checked[p] = true
		}
		for _, f := range foreignFields[file] {
			if strings.Contains(m.text, f) {
				foreignSeen[file+" "+f] = true
			}
		}
	}
	for file, fs := range foreignFields {
		for _, f := range fs {
			if !foreignSeen[file+" "+f] {
				t.Errorf("foreignFields: %s no longer names %s; remove it from the list", file, f)
			}
		}
	}
	for _, want := range []string{"spec.kubeconfigSecretRef", "spec.source.git.commit", "spec.release"} {
		if !checked[want] {
			t.Errorf("the messages no longer name %s, or the extraction misses it; checked: %v", want, sortedKeys(checked))
		}
	}
	t.Logf("%d field paths checked: %v", len(checked), sortedKeys(checked))
}

// TestConditionReasonsAreDocumented: every condition reason the controller sets has its row
// in docs/operations.md's troubleshooting, with what to do.
func TestConditionReasonsAreDocumented(t *testing.T) {
	root := repoRoot(t)
	reasons, err := reasonConstants(root, "api", "internal/controller")
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) < 20 {
		t.Fatalf("found only %d Reason constants: %v", len(reasons), reasons)
	}
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	ts := section(string(ops), "## Troubleshooting")
	if ts == "" {
		t.Fatal("docs/operations.md has no section \"## Troubleshooting\"")
	}
	readDoc := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(root, "docs", name))
		return string(b)
	}
	for _, r := range sortedKeys(reasons) {
		if p := reasonProblem(r, ts, readDoc); p != "" {
			t.Errorf("%s, declared as %s", p, reasons[r])
		}
	}
}

// TestErrorFixCheckers: each check fails on a deliberately broken example.
func TestErrorFixCheckers(t *testing.T) {
	tree := fixTree()
	t.Run("commands", func(t *testing.T) {
		for _, c := range []struct {
			text string
			bad  bool
		}{
			{"run `rewind clusters join X` on the hub", false},
			{"run `rewind clusters joinn X` on the hub", true},
			{"(rewind rolout status X)", true},
			{"approve it (rewind rollout approve X --wave X)", true},
			{"a retry is asked for (rewind retry X X)", true},
			{"see every finding with: rewind plan X --release X -n X", false},
			{"see every finding with: rewind plan X --relase X", true},
			{"upload them with rewind release create X -n X --manifests/--chart/--bundle ... (the same flags)", false},
			{"upload them with rewind release create X --manifests/--charts ...", true},
			{"install rewind's CRDs first (rewind install --crds-only, or kubectl apply)", false},
			{"register them with `rewind clusters`", true},
			{"rewind keeps trying", false},
			{"not a rewind snapshot payload (bad magic)", false},
			{"kubectl rewind snapshot list -n X", false},
			{"kubectl rewind snapshot lst", true},
		} {
			_, problems := commandProblems(tree, c.text)
			if got := len(problems) > 0; got != c.bad {
				t.Errorf("%q: problems %q, want some: %v", c.text, problems, c.bad)
			}
		}
	})
	t.Run("docs", func(t *testing.T) {
		docs := "`rewind retry NAME` attempts it again.\n`rewind testbed down --state-dir DIR` stops it.\n`rewind testbed up` starts one.\n"
		for _, c := range []struct {
			text string
			bad  bool
		}{
			{"(rewind retry X)", false},
			{"run `rewind testbed down --state-dir X` first", false},
			{"(rewind rollback X)", true},                       // a real command the docs do not describe
			{"run `rewind testbed up --members X` first", true}, // a real flag the docs do not show with it
			{"(rewind retry X -n X)", false},                    // a hub flag: every command has it (docs/cli.md)
		} {
			ms, problems := commandProblems(tree, c.text)
			if len(problems) > 0 {
				t.Fatalf("%q: %v", c.text, problems)
			}
			problems = docsProblems(ms, docs)
			if got := len(problems) > 0; got != c.bad {
				t.Errorf("%q: problems %q, want some: %v", c.text, problems, c.bad)
			}
		}
	})
	t.Run("documents", func(t *testing.T) {
		read := func(rel string) (string, bool) {
			if rel == "docs/install.md" {
				return "# Install\n## Permissions\n## Clusters the hub cannot reach (pull members)\n", true
			}
			if rel == "README.md" {
				return "# rewind\n## Quick start\n", true
			}
			return "", false
		}
		for _, c := range []struct {
			text string
			bad  bool
		}{
			{"the controller lacks this permission: see docs/install.md#permissions)", false},
			{"see docs/install.md#clusters-the-hub-cannot-reach-pull-members", false},
			{"see docs/install.md, Permissions", false},
			{"see README, Permissions)", true}, // a section the README does not have
			{"see docs/install.md#rbac", true},
			{"see docs/nothing.md", true},
			{"see README.md", false},
		} {
			if got := len(docRefProblems(c.text, read)) > 0; got != c.bad {
				t.Errorf("%q: problems %v, want some: %v", c.text, docRefProblems(c.text, read), c.bad)
			}
		}
	})
	t.Run("fields", func(t *testing.T) {
		ss, err := schemas(filepath.Join(repoRoot(t), "config", "crd", "bases"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			text    string
			foreign []string
			bad     bool
		}{
			{"rollout X: spec.waves[X].clusters names \"a\"", nil, false},
			{"rollout X: spec.wavs[X].clusters names \"a\"", nil, true},
			{"rollout X: spec.waves[X].cluster names \"a\"", nil, true},
			{"fix spec.kubeconfigSecretRef.", nil, false},
			{"push the commit of spec.source.git.commit; rewind keeps trying", nil, false},
			{"push the commit of spec.source.git.comit", nil, true},
			{"the CSV's spec.install.strategy is not deployment", []string{"spec.install"}, false},
			{"the CSV's spec.install.strategy is not deployment", nil, true},
		} {
			_, problems := specPathProblems(c.text, ss, c.foreign)
			if got := len(problems) > 0; got != c.bad {
				t.Errorf("%q: problems %q, want some: %v", c.text, problems, c.bad)
			}
		}
	})
	t.Run("reasons", func(t *testing.T) {
		ts := strings.Join([]string{
			"| reason | what happened | what to do |",
			"| --- | --- | --- |",
			"| `HealthGateFailed` | a gate failed | `rewind rollback NAME` |",
			"| `Baking` | a wave bakes | |",
			"| `Paused` (`Progressing`) | paused | resume it; unlike `Stalled` |",
			"",
			"- **OperatorRelease** (`TagMoved`, `Gone`): see [Release an operator](releases.md#release-sources).",
			"- **Snapshot** `ChecksumMismatch`: it is never restored.",
			"- **Store** `InUse`: see [Snapshots](snapshots.md).",
		}, "\n")
		readDoc := func(name string) string {
			if name == "releases.md" {
				return "| `TagMoved` | the tag moved | pin it again |"
			}
			return ""
		}
		for _, c := range []struct {
			reason string
			bad    bool
		}{
			{"HealthGateFailed", false},
			{"Baking", true},      // a row with nothing to do
			{"Stalled", true},     // named in another row's last cell only
			{"Progressing", true}, // the condition of another row's reason
			{"TagMoved", false},
			{"Gone", true}, // sent to a document that does not name it
			{"Missing", true},
			{"ChecksumMismatch", true}, // a list item with no link, beside one with a link
			{"InUse", true},            // linked to a document that does not name it
		} {
			if got := reasonProblem(c.reason, ts, readDoc) != ""; got != c.bad {
				t.Errorf("%s: problem %v, want %v", c.reason, got, c.bad)
			}
		}
	})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
