package testcluster

import (
	"net"
	"time"
)

func dialTCP(a string) (net.Conn, error) { return net.DialTimeout("tcp", a, time.Second) }
