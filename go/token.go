package fencedlock

import "crypto/rand"

// tokenBytes is a token's size: 128 random bits, as the other clients draw.
const tokenBytes = 16

// newToken is a fresh token from the CSPRNG, as 32 hex digits (text the servers echo nowhere).
func newToken() ([]byte, error) {
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	const digits = "0123456789abcdef"
	out := make([]byte, 2*tokenBytes)
	for i, b := range raw {
		out[2*i], out[2*i+1] = digits[b>>4], digits[b&15]
	}
	return out, nil
}
