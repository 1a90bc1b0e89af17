// Package controlv1 is the generated Go code of gateway.control.v1
// (control.proto): the messages and the gRPC services of the gateway
// dialect the relay serves (see package gateway).
package controlv1

//go:generate protoc -I ../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative gateway/controlv1/control.proto
