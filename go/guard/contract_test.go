package guard

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"example.invalid/fencedlock/go/internal/contract"
)

// guardContract is the part of guard/contract.json the tests read.
type guardContract struct {
	Format int `json:"format"`
	Names  struct {
		DefaultFenceColumn string `json:"default_fence_column"`
		DefaultIDColumn    string `json:"default_id_column"`
	} `json:"names"`
	Metrics struct {
		ResourceLabel      string   `json:"resource_label"`
		StaleRefusalsTotal string   `json:"stale_refusals_total"`
		Steps              []string `json:"steps"`
	} `json:"metrics"`
	Identifiers struct {
		MaxIdentifierBytes int `json:"max_identifier_bytes"`
		Quoted             []struct{ Name, Quoted string }
		QuotedLists        []struct {
			Names  []string `json:"names"`
			Quoted string   `json:"quoted"`
		} `json:"quoted_lists"`
		Refused []struct{ Name, Reason string }
	} `json:"identifiers"`
	Resources []struct {
		Resource string        `json:"resource"`
		Table    contractTable `json:"table"`
	} `json:"resources"`
	Statements []struct {
		Name      string           `json:"name"`
		Dialect   string           `json:"dialect"`
		Statement string           `json:"statement"`
		SQL       string           `json:"sql"`
		Table     *contractTable   `json:"table"`
		Returning []string         `json:"returning"`
		Update    []contractUpdate `json:"update"`
		Values    []any            `json:"values"`
		Names     []string         `json:"names"`
	} `json:"statements"`
	Errors []struct {
		Kind   string         `json:"kind"`
		Text   string         `json:"text"`
		Fields map[string]any `json:"fields"`
	} `json:"errors"`
}

type contractTable struct {
	Name          string `json:"name"`
	Schema        string `json:"schema"`
	IDColumn      string `json:"id_column"`
	FenceColumn   string `json:"fence_column"`
	ResourceLabel string `json:"resource_label"`
}

func (c contractTable) table() Table {
	return Table{Schema: c.Schema, Name: c.Name, ID: c.IDColumn, Fence: c.FenceColumn, Label: c.ResourceLabel}.withDefaults()
}

type contractUpdate struct {
	Op     string `json:"op"`
	Column string `json:"column"`
	Value  any    `json:"value"`
	Values []any  `json:"values"`
	SQL    string `json:"sql"`
}

func loadContract(t *testing.T) guardContract {
	t.Helper()
	var c guardContract
	if err := json.Unmarshal(contract.GuardJSON, &c); err != nil {
		t.Fatalf("guard/contract.json: %v", err)
	}
	if c.Format != 1 || len(c.Statements) == 0 || len(c.Errors) == 0 {
		t.Fatalf("guard/contract.json: format %d, %d statements, %d errors: not the format this package reads",
			c.Format, len(c.Statements), len(c.Errors))
	}
	return c
}

func buildUpdate(t *testing.T, ops []contractUpdate) *Update {
	u := NewUpdate()
	for _, op := range ops {
		switch op.Op {
		case "set":
			u.Set(op.Column, op.Value)
		case "set_sql":
			u.SetSQL(op.Column, op.SQL)
		case "when":
			u.When(op.Column, op.Value)
		case "when_in":
			u.WhenIn(op.Column, op.Values...)
		case "when_sql":
			u.WhenSQL(op.SQL)
		default:
			t.Fatalf("an update op this test does not know: %q", op.Op)
		}
	}
	return u
}

func dialectNamed(t *testing.T, name string) Dialect {
	for _, d := range []Dialect{Postgres, SQLite} {
		if d.String() == name {
			return d
		}
	}
	t.Fatalf("a dialect this package does not know: %q", name)
	return 0
}

func TestStatementsAreTheContracts(t *testing.T) {
	c := loadContract(t)
	seen := map[string]bool{}
	for _, s := range c.Statements {
		d := dialectNamed(t, s.Dialect)
		var tab Table
		if s.Table != nil {
			tab = s.Table.table()
		}
		var got string
		var values []any
		var err error
		switch s.Statement {
		case "claim":
			got, err = claimSQL(tab, d, s.Returning)
		case "write":
			got, values, err = writeSQL(tab, d, buildUpdate(t, s.Update), s.Returning)
			if values == nil {
				values = []any{}
			}
			if s.Values == nil {
				s.Values = []any{}
			}
			if err == nil && !reflect.DeepEqual(values, s.Values) {
				t.Errorf("%s: binds %v, the contract %v", s.Name, values, s.Values)
			}
		case "add_fence_column":
			got, err = addFenceColumnSQL(tab, d)
		case "add_fence_column_if_absent":
			got, err = addFenceColumnIfAbsentSQL(tab)
		case "fence_of":
			got, err = fenceOfSQL(tab, d)
		case "unknown_column":
			got = unknownColumnSQL(len(s.Names))
		case "fence_column_present":
			got = fenceColumnPresentSQL
		default:
			t.Errorf("%s: a statement this package does not build: %q", s.Name, s.Statement)
			continue
		}
		seen[s.Statement] = true
		if err != nil {
			t.Errorf("%s (%s): %v", s.Name, s.Dialect, err)
		} else if got != s.SQL {
			t.Errorf("%s (%s):\n got  %s\n want %s", s.Name, s.Dialect, got, s.SQL)
		}
	}
	for _, want := range []string{"claim", "write", "add_fence_column", "fence_of", "unknown_column"} {
		if !seen[want] {
			t.Errorf("the contract has no %s sample", want)
		}
	}
}

// The Guard's own entry points build the same statements as the builders the contract checks.
func TestGuardHandsOutTheContractsStatements(t *testing.T) {
	g, err := New(Postgres, Table{Name: "payouts", ID: "payout_id"})
	if err != nil {
		t.Fatal(err)
	}
	got, values, err := g.WriteSQL(NewUpdate().Set("state", "SENT").When("state", "PENDING"))
	want := `UPDATE "payouts" SET "state" = $3, "last_fence" = $1 WHERE "payout_id" = $2 AND "last_fence" <= $1 AND "state" = $4`
	if err != nil || got != want || !reflect.DeepEqual(values, []any{"SENT", "PENDING"}) {
		t.Errorf("WriteSQL: %q %v %v", got, values, err)
	}
	claim, err := g.ClaimSQL()
	if err != nil || claim != `UPDATE "payouts" SET "last_fence" = $1 WHERE "payout_id" = $2 AND "last_fence" <= $1 RETURNING "last_fence"` {
		t.Errorf("ClaimSQL: %q %v", claim, err)
	}
}

func TestNamesMetricAndResourcesAreTheContracts(t *testing.T) {
	c := loadContract(t)
	if c.Names.DefaultFenceColumn != DefaultFenceColumn || c.Names.DefaultIDColumn != DefaultIDColumn {
		t.Errorf("defaults %+v, package %q %q", c.Names, DefaultFenceColumn, DefaultIDColumn)
	}
	if c.Metrics.StaleRefusalsTotal != StaleRefusalsTotal || c.Metrics.ResourceLabel != ResourceLabelName {
		t.Errorf("metric %+v, package %q %q", c.Metrics, StaleRefusalsTotal, ResourceLabelName)
	}
	if !reflect.DeepEqual(c.Metrics.Steps, []string{"claim", "write"}) {
		t.Errorf("steps %v: the hook names claim and write", c.Metrics.Steps)
	}
	for _, r := range c.Resources {
		if got := r.Table.table().ResourceLabel(); got != r.Resource {
			t.Errorf("%+v: resource %q, want %q", r.Table, got, r.Resource)
		}
	}
}

func TestIdentifiersAreQuotedAndRefusedAsTheContractSays(t *testing.T) {
	c := loadContract(t)
	if c.Identifiers.MaxIdentifierBytes != MaxIdentifierBytes {
		t.Errorf("max %d, package %d", c.Identifiers.MaxIdentifierBytes, MaxIdentifierBytes)
	}
	for _, q := range c.Identifiers.Quoted {
		if got, err := Quote(q.Name); err != nil || got != q.Quoted {
			t.Errorf("Quote(%q) = %q, %v; want %q", q.Name, got, err, q.Quoted)
		}
	}
	for _, q := range c.Identifiers.QuotedLists {
		if got, err := QuoteList(q.Names); err != nil || got != q.Quoted {
			t.Errorf("QuoteList(%q) = %q, %v; want %q", q.Names, got, err, q.Quoted)
		}
	}
	for _, r := range c.Identifiers.Refused {
		_, err := Quote(r.Name)
		var ie *IdentifierError
		if !errors.As(err, &ie) || ie.Name != r.Name || ie.Reason != r.Reason || !errors.Is(err, ErrIdentifier) {
			t.Errorf("Quote(%q): %v, want refused: %s", r.Name, err, r.Reason)
		}
		// A refused name anywhere refuses the whole statement, before any SQL exists.
		if _, err := New(SQLite, Table{Name: "t", ID: r.Name}); r.Name != "" && !errors.Is(err, ErrIdentifier) {
			t.Errorf("New with id column %q: %v", r.Name, err)
		}
		if _, _, err := writeSQL(Table{Name: "t"}.withDefaults(), Postgres, NewUpdate().WhenIn(r.Name), nil); !errors.Is(err, ErrIdentifier) {
			t.Errorf("WhenIn(%q) with no values: %v", r.Name, err)
		}
		if _, err := claimSQL(Table{Name: "t"}.withDefaults(), Postgres, []string{r.Name}); !errors.Is(err, ErrIdentifier) {
			t.Errorf("returning %q: %v", r.Name, err)
		}
	}
	if _, err := Quote(string(make([]byte, MaxIdentifierBytes))); err == nil {
		t.Error("a name of NUL bytes was quoted")
	}
	if _, err := New(Dialect(9), Table{Name: "t"}); err == nil {
		t.Error("an unknown dialect was accepted")
	}
}

func TestErrorTextsAreTheContracts(t *testing.T) {
	c := loadContract(t)
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	num := func(m map[string]any, k string) (uint64, bool) { f, ok := m[k].(float64); return uint64(f), ok }
	for _, e := range c.Errors {
		var err error
		var sentinel error
		switch e.Kind {
		case "Stale":
			f, _ := num(e.Fields, "fence")
			last, ok := num(e.Fields, "last_fence")
			err, sentinel = &StaleError{Resource: str(e.Fields, "resource"), Fence: f, LastFence: last, HasLastFence: ok}, ErrStale
		case "NotFound":
			err, sentinel = &NotFoundError{Resource: str(e.Fields, "resource")}, ErrNotFound
		case "NullFence":
			err, sentinel = &NullFenceError{Table: str(e.Fields, "table"), Column: str(e.Fields, "column")}, ErrNullFence
		case "UnknownColumn":
			err, sentinel = &UnknownColumnError{Table: str(e.Fields, "table"), Column: str(e.Fields, "column")}, ErrUnknownColumn
		case "InvalidFence":
			f, _ := num(e.Fields, "fence")
			err, sentinel = &InvalidFenceError{Fence: f}, ErrInvalidFence
		default:
			t.Errorf("an error kind this package does not have: %q", e.Kind)
			continue
		}
		if err.Error() != e.Text {
			t.Errorf("%s:\n got  %s\n want %s", e.Kind, err, e.Text)
		}
		if !errors.Is(err, sentinel) {
			t.Errorf("%s: errors.Is(err, its sentinel) is false", e.Kind)
		}
	}
}

func TestFencesOutsideTheRangeAreRefusedBeforeAnyStatement(t *testing.T) {
	for _, f := range []uint64{0, MaxFence + 1, ^uint64(0)} {
		if _, err := bindFence(f); !errors.Is(err, ErrInvalidFence) {
			t.Errorf("fence %d: %v", f, err)
		}
	}
	for _, f := range []uint64{1, MaxFence} {
		if b, err := bindFence(f); err != nil || uint64(b) != f {
			t.Errorf("fence %d: %d %v", f, b, err)
		}
	}
	g, err := New(Postgres, Table{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	// A nil Querier: the refusal must come before any statement is sent.
	if err := g.Claim(context.Background(), nil, 1, 0); !errors.Is(err, ErrInvalidFence) {
		t.Errorf("Claim with fence 0: %v", err)
	}
	if _, err := g.Write(context.Background(), nil, 1, MaxFence+1, NewUpdate()); !errors.Is(err, ErrInvalidFence) {
		t.Errorf("Write with fence MaxFence+1: %v", err)
	}
}
