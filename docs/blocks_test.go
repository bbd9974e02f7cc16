package docs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// block is one tested shell block and the output shown after it, if any.
type block struct {
	file   string
	line   int      // of the opening fence
	script string   // the shell lines
	want   []string // the lines of the "text output" block that follows, if any
}

// parseBlocks returns the tested blocks of a Markdown document, in order.
func parseBlocks(file string, doc []byte) ([]block, error) {
	var blocks []block
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	var cur *block    // inside a tested block
	var out *[]string // inside the output block of the last tested block
	inOther := false  // inside another fenced block
	lastTested := -1  // index of the block the next output block belongs to
	for sc.Scan() {
		n++
		l := sc.Text()
		t := strings.TrimSpace(l)
		fence := strings.HasPrefix(t, "```")
		switch {
		case cur != nil:
			if fence {
				blocks = append(blocks, *cur)
				lastTested = len(blocks) - 1
				cur = nil
				continue
			}
			cur.script += l + "\n"
		case out != nil:
			if fence {
				out = nil
				lastTested = -1
				continue
			}
			*out = append(*out, l)
		case inOther:
			if fence {
				inOther = false
			}
		case fence:
			info := strings.Fields(strings.TrimPrefix(t, "```"))
			switch {
			case len(info) == 2 && info[0] == "sh" && info[1] == "tested":
				cur = &block{file: file, line: n}
			case len(info) == 2 && info[0] == "text" && info[1] == "output":
				if lastTested < 0 {
					return nil, fmt.Errorf("%s:%d: a \"text output\" block must follow a \"sh tested\" block directly", file, n)
				}
				out = &blocks[lastTested].want
			default:
				inOther = true
				lastTested = -1
			}
		case t != "":
			lastTested = -1
		}
	}
	if cur != nil || out != nil || inOther {
		return nil, fmt.Errorf("%s: a fenced block is not closed", file)
	}
	return blocks, sc.Err()
}

// squash collapses runs of blanks, so that a table's column widths do not matter.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// matchOutput checks that want's non-blank lines appear in got's lines, in order; "..." in a
// wanted line matches any text.
func matchOutput(got string, want []string) error {
	lines := strings.Split(got, "\n")
	i := 0
	for _, w := range want {
		w = squash(w)
		if w == "" {
			continue
		}
		parts := strings.Split(w, "...")
		for k := range parts {
			parts[k] = regexp.QuoteMeta(strings.TrimSpace(parts[k]))
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		for ; i < len(lines) && !re.MatchString(squash(lines[i])); i++ {
		}
		if i == len(lines) {
			return fmt.Errorf("no line (after the ones matched before it) matches %q", w)
		}
		i++
	}
	return nil
}

const marker = "@@rewind-docs-block "

func TestParseBlocks(t *testing.T) {
	doc := "text\n```sh tested\necho a\n```\n\n```text output\na\n```\n```sh\nnot run\n```\n```sh tested\necho b\n```\n"
	blocks, err := parseBlocks("x.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].script != "echo a\n" || len(blocks[0].want) != 1 || blocks[1].script != "echo b\n" || blocks[1].want != nil {
		t.Fatalf("parsed %+v", blocks)
	}
	if _, err := parseBlocks("x.md", []byte("```sh\nfoo\n```\n```text output\na\n```\n")); err == nil {
		t.Error("an output block after an untested block should be refused")
	}
	if err := matchOutput("x\nNAME   READY\nm1     True  4s\n", []string{"NAME READY", "m1 True ..."}); err != nil {
		t.Error(err)
	}
	if err := matchOutput("m1 True\nNAME READY\n", []string{"NAME READY", "m1 True"}); err == nil {
		t.Error("lines out of order should not match")
	}
}
