package release

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// Whatever Parse accepts, Canonical turns into a fixed point: parsing and serializing again
// gives the same bytes.
func FuzzParseCanonical(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}` + "\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","metadata":{"name":"l"},"items":[]}` + "\n\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","creationTimestamp":null},"status":{},"n":1.5e300}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Parse(data)
		if err != nil {
			return
		}
		c, err := Canonical(objs)
		if err != nil {
			return // duplicates or unencodable values
		}
		again, err := Parse(c)
		if err != nil {
			t.Fatalf("Parse(Canonical(...)): %v", err)
		}
		c2, err := Canonical(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c, c2) {
			t.Fatalf("not a fixed point:\n%s\n%s", c, c2)
		}
	})
}

// The images ValidateImage accepts are exactly those the OperatorRelease CRD rule accepts
// (the CEL rule, transcribed), restricted to images without whitespace.
func FuzzValidateImage(f *testing.F) {
	f.Add("example.com/op@"+digest64, commit)
	f.Add("example.com/op:"+commit[:7], commit)
	f.Add("example.com/op:latest", commit)
	f.Add("localhost:5000/op:abcdef0", "abcdef0123")
	f.Add("op:abc", "")
	digestRule := regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	tagRule := regexp.MustCompile(`^[^@]+:[0-9a-f]{7,40}$`)
	f.Fuzz(func(t *testing.T, image, gitCommit string) {
		if strings.ContainsAny(image, " \t\n") || len(image) > 512 || image == "" {
			return
		}
		celOK := digestRule.MatchString(image)
		if !celOK && tagRule.MatchString(image) {
			tag := image[strings.LastIndex(image, ":")+1:]
			celOK = strings.HasPrefix(gitCommit, tag) || strings.HasPrefix(tag, gitCommit)
		}
		err := ValidateImage(image, gitCommit)
		if err == nil && !celOK {
			t.Fatalf("ValidateImage(%q, %q) accepted an image the CRD rejects", image, gitCommit)
		}
	})
}
