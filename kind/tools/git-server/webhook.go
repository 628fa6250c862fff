package main

// Gitea push webhooks, after a push that changed refs, to the loopback url a repository names.

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// webhookFile, in a bare repository's directory, names where its pushes are announced.
const webhookFile = "tenancy-hub-webhook.json"

// webhook is the content of webhookFile.
type webhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// pushEvent is the part of Gitea's push payload a receiver reads.
type pushEvent struct {
	Ref        string         `json:"ref"`
	Before     string         `json:"before"`
	After      string         `json:"after"`
	Repository pushRepository `json:"repository"`
	Pusher     map[string]any `json:"pusher"`
	Commits    []any          `json:"commits"`
}

// pushRepository names the repository as Gitea does.
type pushRepository struct {
	Name     string `json:"name"`
	FullName string `json:"full_name"`
	CloneURL string `json:"clone_url"`
	SSHURL   string `json:"ssh_url"`
	HTMLURL  string `json:"html_url"`
}

// notify sends the push event of one changed ref, when the repository names a webhook.
func (s *server) notify(dir, ref, before, after string) {
	data, err := os.ReadFile(filepath.Join(dir, webhookFile))
	if err != nil {
		return
	}
	var hook webhook
	if err := json.Unmarshal(data, &hook); err != nil || hook.URL == "" {
		log.Printf("%s of %s is not {\"url\", \"secret\"}: %v", webhookFile, dir, err)
		return
	}
	if u, err := url.Parse(hook.URL); err != nil || !loopback(u.Hostname()) {
		log.Printf("the webhook of %s is not a loopback url; not sent", dir)
		return
	}
	rel, _ := filepath.Rel(s.repos, dir)
	full := strings.TrimSuffix(filepath.ToSlash(rel), ".git")
	body, _ := json.Marshal(pushEvent{
		Ref: ref, Before: before, After: after, Pusher: map[string]any{"login": "lab"}, Commits: []any{},
		Repository: pushRepository{
			Name: filepath.Base(full), FullName: full, HTMLURL: s.httpURL + "/" + full,
			CloneURL: s.httpURL + "/" + filepath.ToSlash(rel), SSHURL: s.sshURL + "/" + filepath.ToSlash(rel),
		},
	})
	mac := hmac.New(sha256.New, []byte(hook.Secret))
	mac.Write(body)
	delivery := make([]byte, 16)
	_, _ = rand.Read(delivery)
	s.hooks.Add(1)
	go func() {
		defer s.hooks.Done()
		req, _ := http.NewRequest(http.MethodPost, hook.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gitea-Event", "push")
		req.Header.Set("X-Gitea-Event-Type", "push")
		req.Header.Set("X-Gitea-Delivery", hex.EncodeToString(delivery))
		req.Header.Set("X-Gitea-Signature", hex.EncodeToString(mac.Sum(nil)))
		client := &http.Client{Timeout: 10 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			log.Printf("webhook of %s %s: %v", full, ref, err)
			return
		}
		resp.Body.Close()
		log.Printf("webhook of %s %s -> %s: %s", full, ref, after, resp.Status)
	}()
}

// loopback tells whether host is a loopback address (or localhost).
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
