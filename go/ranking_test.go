package fencedlock

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"example.invalid/fencedlock/go/internal/contract"
)

// TestRankingVectors: the designated server of a key is the protocol crate's (contract.json's
// vectors.ranking), so Go waiters queue where Rust, Python and Node waiters of the same
// Redlock queue.
func TestRankingVectors(t *testing.T) {
	var doc struct {
		Vectors struct {
			Ranking []struct {
				Key    string   `json:"key"`
				Names  []string `json:"names"`
				Scores []struct {
					Int string `json:"int"`
				} `json:"scores"`
				Order []int `json:"order"`
			} `json:"ranking"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(contract.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors.Ranking) == 0 {
		t.Fatal("contract.json has no ranking vectors")
	}
	for _, v := range doc.Vectors.Ranking {
		for i, name := range v.Names {
			want, err := strconv.ParseUint(v.Scores[i].Int, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := score(v.Key, name); got != want {
				t.Errorf("score(%q, %q) = %d, want %d", v.Key, name, got, want)
			}
		}
		if got := ranking(v.Key, v.Names); !slices.Equal(got, v.Order) {
			t.Errorf("ranking(%q, %q) = %v, want %v", v.Key, v.Names, got, v.Order)
		}
	}
}
