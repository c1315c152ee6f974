package fencedlocktest

// An exact RESP2 connection for the conformance runner: it tells a simple string from a bulk
// string and nil from an empty array, which a client library's decoded replies blur.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Kind is a reply's RESP2 type.
type Kind int

// The RESP2 reply types.
const (
	Nil Kind = iota
	Int
	Bulk
	Simple
	ErrorReply
	Array
)

// Reply is one reply: its kind, and its integer, its string or error text, or its items.
type Reply struct {
	Kind  Kind
	Int   int64
	Str   []byte
	Items []Reply
}

// Sender sends one request and returns its reply: a connection of the client under test.
// A failure to get an answer is an error; an error reply is a Reply of Kind ErrorReply.
type Sender interface {
	Send(words [][]byte) (Reply, error)
}

// RESPConn is an exact RESP2 connection (a Sender).
type RESPConn struct {
	c net.Conn
	r *bufio.Reader
}

// DialRESP connects to addr.
func DialRESP(addr string) (*RESPConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &RESPConn{c: c, r: bufio.NewReader(c)}, nil
}

// Close closes the connection.
func (c *RESPConn) Close() { c.c.Close() }

// Send writes words as a command and reads its reply, within 30 s.
func (c *RESPConn) Send(words [][]byte) (Reply, error) {
	buf := []byte("*" + strconv.Itoa(len(words)) + "\r\n")
	for _, w := range words {
		buf = append(buf, "$"+strconv.Itoa(len(w))+"\r\n"...)
		buf = append(append(buf, w...), "\r\n"...)
	}
	_ = c.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.c.Write(buf); err != nil {
		return Reply{}, err
	}
	return c.read()
}

func (c *RESPConn) line() (string, error) {
	l, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("bad RESP line %q", l)
	}
	return l[:len(l)-2], nil
}

func (c *RESPConn) read() (Reply, error) {
	l, err := c.line()
	if err != nil {
		return Reply{}, err
	}
	body := l[1:]
	switch l[0] {
	case '+':
		return Reply{Kind: Simple, Str: []byte(body)}, nil
	case '-':
		return Reply{Kind: ErrorReply, Str: []byte(body)}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return Reply{Kind: Int, Int: n}, err
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return Reply{Kind: Nil}, err
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, data); err != nil {
			return Reply{}, err
		}
		return Reply{Kind: Bulk, Str: data[:n]}, nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return Reply{Kind: Nil}, err
		}
		out := Reply{Kind: Array, Items: make([]Reply, n)}
		for i := range out.Items {
			if out.Items[i], err = c.read(); err != nil {
				return Reply{}, err
			}
		}
		return out, nil
	}
	return Reply{}, fmt.Errorf("unknown RESP type %q", l)
}
