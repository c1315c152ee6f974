package guard

import "strings"

// MaxIdentifierBytes is PostgreSQL's longest identifier (NAMEDATALEN - 1). PostgreSQL
// truncates longer names with only a notice, so two long names could silently become one
// column; they are refused instead.
const MaxIdentifierBytes = 63

// Quote returns name as a delimited identifier, "…" with each " doubled: the SQL standard's
// form, which PostgreSQL and SQLite both read back as exactly the given name. Every name the
// package puts into a statement goes through it; values never do (they are bound). It refuses
// an empty name, a NUL byte and a name over MaxIdentifierBytes with an *IdentifierError.
func Quote(name string) (string, error) {
	var b strings.Builder
	if err := writeQuoted(&b, name); err != nil {
		return "", err
	}
	return b.String(), nil
}

// QuoteList quotes each name and joins them with ", ".
func QuoteList(names []string) (string, error) {
	var b strings.Builder
	if err := writeQuotedList(&b, names); err != nil {
		return "", err
	}
	return b.String(), nil
}

func checkIdentifier(name string) error {
	switch {
	case name == "":
		return &IdentifierError{Name: name, Reason: "empty"}
	case strings.IndexByte(name, 0) >= 0:
		return &IdentifierError{Name: name, Reason: "contains a NUL byte"}
	case len(name) > MaxIdentifierBytes:
		return &IdentifierError{Name: name, Reason: "longer than 63 bytes (PostgreSQL would truncate it)"}
	}
	return nil
}

func writeQuoted(b *strings.Builder, name string) error {
	if err := checkIdentifier(name); err != nil {
		return err
	}
	b.WriteByte('"')
	b.WriteString(strings.ReplaceAll(name, `"`, `""`))
	b.WriteByte('"')
	return nil
}

func writeQuotedList(b *strings.Builder, names []string) error {
	for i, name := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		if err := writeQuoted(b, name); err != nil {
			return err
		}
	}
	return nil
}
