package main

// SSH: git-upload-pack and git-receive-pack for the clients of the authorized_keys file.

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"

	"github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// sshServer is the SSH side, its host key from hostKey.
func (s *server) sshServer(hostKey string) (*ssh.Server, error) {
	server := &ssh.Server{Handler: s.session, PublicKeyHandler: s.knownClient}
	if err := server.SetOption(ssh.HostKeyFile(hostKey)); err != nil {
		return nil, fmt.Errorf("the host key %s: %w", hostKey, err)
	}
	return server, nil
}

// knownClient accepts a key of the authorized_keys file, read at each login.
func (s *server) knownClient(_ ssh.Context, key ssh.PublicKey) bool {
	data, err := os.ReadFile(s.authorizedKeys)
	if err != nil {
		log.Printf("reading %s: %v", s.authorizedKeys, err)
		return false
	}
	for len(data) > 0 {
		known, _, _, rest, err := gossh.ParseAuthorizedKey(data)
		if err != nil {
			return false
		}
		if bytes.Equal(known.Marshal(), key.Marshal()) {
			return true
		}
		data = rest
	}
	return false
}

// session runs the one git program a client asks for: git-upload-pack or git-receive-pack of a
// repository of the server.
func (s *server) session(sess ssh.Session) {
	args := sess.Command()
	if len(args) != 2 || (args[0] != "git-upload-pack" && args[0] != "git-receive-pack") {
		fmt.Fprintf(sess.Stderr(), "only git-upload-pack and git-receive-pack are served, not %q\n", sess.RawCommand())
		_ = sess.Exit(1)
		return
	}
	dir, err := s.repoDir(args[1])
	if err != nil {
		fmt.Fprintln(sess.Stderr(), err)
		_ = sess.Exit(1)
		return
	}
	run := func() error {
		cmd := exec.CommandContext(sess.Context(), args[0], dir)
		cmd.Env = append(os.Environ(), gitEnv()...)
		for _, kv := range sess.Environ() {
			if strings.HasPrefix(kv, "GIT_PROTOCOL=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Stdout, cmd.Stderr = sess, sess.Stderr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		// Not waited for: a client keeps its side open until the program's answer is read.
		go func() { _, _ = io.Copy(stdin, sess); stdin.Close() }()
		return cmd.Wait()
	}
	if args[0] == "git-receive-pack" {
		err = s.push(dir, run)
	} else {
		err = run()
	}
	code := 0
	if err != nil {
		log.Printf("%s %s: %v", args[0], args[1], err)
		code = 1
	}
	_ = sess.Exit(code)
}
