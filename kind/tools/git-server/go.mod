// The lab's Git server (smart HTTP through git http-backend, and SSH) for tenancy-hub's tests.
module tenancy-hub.local/git-server

go 1.26.0

require (
	github.com/gliderlabs/ssh v0.3.8
	golang.org/x/crypto v0.59.0
)

require (
	github.com/anmitsu/go-shlex v0.0.0-20200514113438-38f4b401e2be // indirect
	golang.org/x/sys v0.50.0 // indirect
)
