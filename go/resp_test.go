package fencedlock

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

type respKind int

const (
	respNil respKind = iota
	respInt
	respBulk
	respSimple
	respError
	respArray
)

type resp struct {
	kind  respKind
	n     int64
	s     []byte
	items []resp
}

type respConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialResp(addr string) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c)}, nil
}

func (c *respConn) close() { c.c.Close() }

// send writes words as a command and reads its reply, within 30 s.
func (c *respConn) send(words [][]byte) (resp, error) {
	buf := []byte("*" + strconv.Itoa(len(words)) + "\r\n")
	for _, w := range words {
		buf = append(buf, "$"+strconv.Itoa(len(w))+"\r\n"...)
		buf = append(append(buf, w...), "\r\n"...)
	}
	_ = c.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.c.Write(buf); err != nil {
		return resp{}, err
	}
	return c.read()
}

func (c *respConn) line() (string, error) {
	l, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("bad RESP line %q", l)
	}
	return l[:len(l)-2], nil
}

func (c *respConn) read() (resp, error) {
	l, err := c.line()
	if err != nil {
		return resp{}, err
	}
	body := l[1:]
	switch l[0] {
	case '+':
		return resp{kind: respSimple, s: []byte(body)}, nil
	case '-':
		return resp{kind: respError, s: []byte(body)}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return resp{kind: respInt, n: n}, err
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return resp{kind: respNil}, err
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, data); err != nil {
			return resp{}, err
		}
		return resp{kind: respBulk, s: data[:n]}, nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return resp{kind: respNil}, err
		}
		out := resp{kind: respArray, items: make([]resp, n)}
		for i := range out.items {
			if out.items[i], err = c.read(); err != nil {
				return resp{}, err
			}
		}
		return out, nil
	}
	return resp{}, fmt.Errorf("unknown RESP type %q", l)
}
