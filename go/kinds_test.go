package fencedlock

import "errors"

// isKind says whether err matches the sentinel and is an *Error of its kind.
func isKind(err, sentinel error) bool {
	var fe *Error
	return errors.Is(err, sentinel) && errors.As(err, &fe)
}
