package tcpproxy

import (
	"bufio"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// echo serves one line back per connection.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return err
}

func TestDownCutsAndRefusesUntilUp(t *testing.T) {
	p, err := Start(echo(t))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, roundTrip(p.Addr()))

	held, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer held.Close()
	p.Down()
	_, err = bufio.NewReader(held).ReadString('\n')
	require.Error(t, err, "an open connection is cut")
	require.Error(t, roundTrip(p.Addr()), "a new connection is refused")

	p.Up()
	require.NoError(t, roundTrip(p.Addr()))
}
