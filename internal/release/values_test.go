package release_test

import (
	"fmt"
	"testing"

	"github.com/rewind-dev/rewind/internal/release"
)

func TestMergeValues(t *testing.T) {
	dst := map[string]any{"replicas": 1, "image": map[string]any{"repository": "r", "digest": "d1"}, "extraArgs": []any{"a"}}
	dst = release.MergeValues(dst, map[string]any{"image": map[string]any{"digest": "d2"}, "extraArgs": []any{"b"}, "new": true})
	want := map[string]any{"replicas": 1, "image": map[string]any{"repository": "r", "digest": "d2"}, "extraArgs": []any{"b"}, "new": true}
	if got, w := fmt.Sprint(dst), fmt.Sprint(want); got != w {
		t.Errorf("merged %s, want %s (maps merge, lists and scalars are replaced)", got, w)
	}
}
