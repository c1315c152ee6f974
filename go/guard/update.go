package guard

import "strings"

// Update is what one guarded write sets and the state it requires besides the fence. Values
// are bound parameters; the *SQL methods take SQL text the program itself writes (like any
// query string), never input. Build it with NewUpdate and the chained methods.
type Update struct {
	sets       []assignment
	conditions []condition
}

type assignment struct {
	column string
	value  any
	sql    string
	isSQL  bool
}

type conditionKind int

const (
	condEquals conditionKind = iota
	condIn
	condSQL
)

type condition struct {
	kind   conditionKind
	column string
	values []any
	sql    string
}

// NewUpdate is an update that sets nothing but the fence.
func NewUpdate() *Update { return &Update{} }

// Set sets column to a bound value.
func (u *Update) Set(column string, value any) *Update {
	u.sets = append(u.sets, assignment{column: column, value: value})
	return u
}

// SetSQL sets column to an SQL expression, e.g. SetSQL("sent", `"sent" + 1`).
func (u *Update) SetSQL(column, expression string) *Update {
	u.sets = append(u.sets, assignment{column: column, sql: expression, isSQL: true})
	return u
}

// When requires column = value (the row is still in the state this holder read).
func (u *Update) When(column string, value any) *Update {
	u.conditions = append(u.conditions, condition{kind: condEquals, column: column, values: []any{value}})
	return u
}

// WhenIn requires column to be one of values; no values match no row.
func (u *Update) WhenIn(column string, values ...any) *Update {
	u.conditions = append(u.conditions, condition{kind: condIn, column: column, values: values})
	return u
}

// WhenSQL requires an SQL predicate, e.g. WhenSQL(`"amount_cents" > 0`).
func (u *Update) WhenSQL(predicate string) *Update {
	u.conditions = append(u.conditions, condition{kind: condSQL, sql: predicate})
	return u
}

// hasPrecondition tells a write that matched no row at a current fence apart: with a
// precondition the state moved on; without one the row was absent.
func (u *Update) hasPrecondition() bool { return u != nil && len(u.conditions) > 0 }

// columns are the names the update sets and compares (SQLite checks them against the table).
func (u *Update) columns() []string {
	if u == nil {
		return nil
	}
	var names []string
	for _, s := range u.sets {
		names = append(names, s.column)
	}
	for _, c := range u.conditions {
		if c.kind != condSQL {
			names = append(names, c.column)
		}
	}
	return names
}

// render appends the assignments (each followed by ", ", so the fence's comes last) to sets
// and the precondition (" AND …" clauses) to conds, numbering placeholders from first; it
// returns the values they bind, in order.
func (u *Update) render(d Dialect, first int, sets, conds *strings.Builder) ([]any, error) {
	if u == nil {
		return nil, nil
	}
	var params []any
	bind := func(b *strings.Builder, v any) {
		params = append(params, v)
		d.writePlaceholder(b, first+len(params)-1)
	}
	for _, s := range u.sets {
		if err := writeQuoted(sets, s.column); err != nil {
			return nil, err
		}
		sets.WriteString(" = ")
		if s.isSQL {
			sets.WriteString("(" + s.sql + ")")
		} else {
			bind(sets, s.value)
		}
		sets.WriteString(", ")
	}
	for _, c := range u.conditions {
		conds.WriteString(" AND ")
		switch {
		case c.kind == condSQL:
			conds.WriteString("(" + c.sql + ")")
		case c.kind == condIn && len(c.values) == 0:
			if err := checkIdentifier(c.column); err != nil {
				return nil, err
			}
			conds.WriteString("FALSE")
		default:
			if err := writeQuoted(conds, c.column); err != nil {
				return nil, err
			}
			if c.kind == condEquals {
				conds.WriteString(" = ")
				bind(conds, c.values[0])
				continue
			}
			conds.WriteString(" IN (")
			for i, v := range c.values {
				if i > 0 {
					conds.WriteString(", ")
				}
				bind(conds, v)
			}
			conds.WriteByte(')')
		}
	}
	return params, nil
}
