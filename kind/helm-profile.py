#!/usr/bin/env python3
"""Profiles one `helm upgrade --install` as the operator runs it, per chart source, on the lab.

    kind/helm-profile.py [--dir DIR] [--cluster member-1] [--calls 6] sources|trim|phases

- sources: helm's CPU seconds, wall time and peak RSS per call, and the API server's CPU seconds and
  requests per call, for a chart-home directory, a repository chart (a small index and a 10 MiB
  one), an OCI chart and a chart archive on disk, each installed then upgraded `--calls` times;
  `helm version` gives the cost of starting the process alone.
- trim: the same for the operator's trimmed call (the namespace made first, no client-side OpenAPI
  check) and the Go runtime settings of helm children (GOMAXPROCS, GOGC).
- phases: where helm's CPU goes, from Go CPU profiles (HELM_PPROF_CPU_PROFILE) of every call,
  each sample put in the first phase whose functions are on its stack.

Needs a running lab (kind/up.sh); serves its chart sources on loopback (an HTTP repository, an OCI
registry with a certificate from the lab's CA) and stops them when done. Figures are medians.
"""
import argparse
import collections
import copy
import glob
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, 'config', 'charts', 'deployment-example')
LABELS = ('--labels=multitenancy.dev/managed-by=tenancy-hub,multitenancy.dev/controller-namespace=p,'
          'multitenancy.dev/controller-name=p,multitenancy.dev/spec-hash=0')
TRIM = ['--disable-openapi-validation']

# (phase, pattern on any frame of a sample's stack); the first phase that matches takes the sample.
PHASES = [
    ('GC and runtime background',
     r'^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|mcall|morestack|sysmon|gcStart|forcegchelper)|^runtime\.gcDrain'),
    ('OpenAPI download and parse (client-side validation)', r'kube-openapi|openapi|\.Validat|jsonpointer'),
    ('repository index download and parse', r'helm/v4/pkg/repo|FindChartInRepoURL|IndexFile'),
    ('OCI registry (resolve, pull)', r'helm/v4/pkg/registry|oras'),
    ('kubeconfig load', r'clientcmd\.'),
    ('discovery (API groups and resources)', r'client-go/discovery|GetVersionSet|getCapabilities|restmapper'),
    ('chart load', r'chart/.*loader|LoadArchive|LoadDir'),
    ('render (templates)', r'helm/v4/pkg/engine|text/template|renderResources'),
    ('manifests to objects', r'pkg/kube\.\(\*Client\)\.Build|resource\.\(\*Builder\)'),
    ('apply (create, patch)', r'pkg/kube\.\(\*Client\)\.(Update|Create)|strategicpatch|jsonmergepatch'),
    ('release storage (read, write, gzip)', r'storage/driver|storage\.\(\*Storage\)|compress/gzip'),
    ('TLS and HTTP', r'crypto/tls|net/http|x/net/http2|crypto/'),
    ('flags, plugins, settings', r'cobra|getter\.|plugin|cli\.\(\*EnvSettings\)'),
]


class Lab:
    """The lab's binaries, kubeconfig and one cluster's API server (its pid, CPU and request count)."""

    def __init__(self, lab_dir, cluster):
        self.dir, self.cluster = lab_dir, cluster
        self.env = dict(os.environ)
        for line in open(os.path.join(lab_dir, 'env')):
            m = re.match(r'export (\w+)="(.*)"', line.strip())
            if m:
                self.env[m[1]] = m[2].replace('$PATH', os.environ.get('PATH', ''))
        self.bin = self.env['PATH'].split(':')[0]
        self.env['SSL_CERT_FILE'] = os.path.join(lab_dir, 'pki', 'ca.crt')
        pids = {line.split()[1]: int(line.split()[0]) for line in open(os.path.join(lab_dir, 'pids'))}
        self.apiserver = pids[f'{cluster}-kube-apiserver']
        kubeconfig = open(os.path.join(lab_dir, 'clusters', cluster, 'admin.kubeconfig')).read()
        self.server = re.search(r'server: "([^"]+)"', kubeconfig)[1]
        pki = os.path.join(lab_dir, 'pki')
        self.tls = ssl.create_default_context(cafile=os.path.join(pki, 'ca.crt'))
        self.tls.load_cert_chain(os.path.join(pki, f'{cluster}-admin.crt'), os.path.join(pki, f'{cluster}-admin.key'))

    def tool(self, name):
        return os.path.join(self.bin, name)

    def api_cpu(self):
        fields = open(f'/proc/{self.apiserver}/stat').read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')

    def api_requests(self):
        body = urllib.request.urlopen(f'{self.server}/metrics', context=self.tls).read().decode()
        return sum(float(line.rsplit(' ', 1)[1]) for line in body.splitlines()
                   if line.startswith('apiserver_request_total{'))

    def kube(self, *args):
        subprocess.run([self.tool('kubectl'), f'--kubeconfig={self.dir}/kubeconfig', f'--context={self.cluster}', *args],
                       env=self.env, capture_output=True, check=False)


class Sources:
    """The chart served four ways on loopback: an HTTP repository with a small index and one with a
    10 MiB index, an OCI registry, and the archive on disk; stopped by `stop`."""

    def __init__(self, lab):
        self.lab, self.dir, self.children = lab, tempfile.mkdtemp(prefix='helm-profile-'), []
        d = self.dir
        small, large = os.path.join(d, 'repo'), os.path.join(d, 'repo-large')
        os.makedirs(small)
        self.run(['helm', 'package', CHART, '-d', small])
        self.archive = glob.glob(os.path.join(small, '*.tgz'))[0]
        self.run(['helm', 'repo', 'index', small])
        os.makedirs(large)
        shutil.copy(self.archive, large)
        # In a child process: this one stays small, since a spawned helm's peak RSS counts the
        # memory it shares with its parent until exec.
        subprocess.run([sys.executable, __file__, 'large-index', os.path.join(small, 'index.yaml'),
                        os.path.join(large, 'index.yaml')], check=True)
        self.small = f'http://127.0.0.1:{self.serve_http(small)}'
        self.large = f'http://127.0.0.1:{self.serve_http(large)}'
        self.oci = self.serve_registry()

    def run(self, args):
        out = subprocess.run([self.lab.tool(args[0])] + args[1:], env=self.lab.env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f'{" ".join(args)} failed: {out.stderr}')
        return out.stdout

    @staticmethod
    def large_index(small, large):
        """The chart's index padded with 24,000 other entries, as a large public repository's is."""
        import yaml  # PyYAML; only for this step
        index = yaml.safe_load(open(small))
        real = next(iter(index['entries'].values()))[0]
        for i in range(3000):
            name = f'other-{i}'
            index['entries'][name] = []
            for v in range(8):
                e = copy.deepcopy(real)
                e.update(name=name, version=f'1.{v}.0', urls=[f'{name}-1.{v}.0.tgz'],
                         description='a synthetic entry padding the index to the size of a public repository ' * 2)
                index['entries'][name].append(e)
        yaml.safe_dump(index, open(large, 'w'))

    def free_port(self):
        import socket
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            return s.getsockname()[1]

    def serve_http(self, directory):
        port = self.free_port()
        self.children.append(subprocess.Popen(
            [sys.executable, '-m', 'http.server', str(port), '--bind', '127.0.0.1', '--directory', directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.wait(lambda: urllib.request.urlopen(f'http://127.0.0.1:{port}/index.yaml').status == 200)
        return port

    def serve_registry(self):
        d, pki = os.path.join(self.dir, 'registry'), os.path.join(self.lab.dir, 'pki')
        os.makedirs(d)
        sh = (f'cd {d} && openssl ecparam -name prime256v1 -genkey -noout -out tls.key '
              f'&& openssl req -new -key tls.key -subj /CN=registry -out tls.csr '
              f"&& printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext "
              f'&& openssl x509 -req -in tls.csr -CA {pki}/ca.crt -CAkey {pki}/ca.key -CAcreateserial '
              f'-CAserial {d}/serial -days 1 -extfile ext -out tls.crt')
        subprocess.run(['bash', '-c', sh], check=True, capture_output=True)
        host = f'127.0.0.1:{self.free_port()}'
        with open(os.path.join(d, 'config.yml'), 'w') as f:
            f.write(f'version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {d}/data}}}}\n'
                    f'http:\n  addr: {host}\n  tls: {{certificate: {d}/tls.crt, key: {d}/tls.key}}\n')
        self.children.append(subprocess.Popen([self.lab.tool('registry'), 'serve', os.path.join(d, 'config.yml')],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.wait(lambda: subprocess.run([self.lab.tool('helm'), 'push', self.archive, f'oci://{host}/charts'],
                                         env=self.lab.env, capture_output=True).returncode == 0)
        return f'oci://{host}/charts/deployment-example'

    @staticmethod
    def wait(check, seconds=30):
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                if check():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit('a chart source did not come up within 30 s')

    def chart(self, source):
        """The chart arguments of a source, as the operator passes them."""
        return {
            'chart home': ['--', 'app', CHART],
            'repository': [f'--repo={self.small}', '--version=0.1.0', '--', 'app', 'deployment-example'],
            'repository, 10 MiB index': [f'--repo={self.large}', '--version=0.1.0', '--', 'app', 'deployment-example'],
            'OCI': ['--version=0.1.0', '--', 'app', self.oci],
            'archive on disk': ['--', 'app', self.archive],
        }[source]

    def stop(self):
        for child in self.children:
            child.terminate()
            child.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def measured(lab, args, env=None, profile=None):
    """Runs one helm call: its CPU, wall time and peak RSS, and the API server's CPU and requests."""
    environment = dict(lab.env, **(env or {}))
    if profile:
        environment['HELM_PPROF_CPU_PROFILE'] = profile
    requests, api, started = lab.api_requests(), lab.api_cpu(), time.time()
    with tempfile.NamedTemporaryFile() as err:
        # posix_spawn, not fork: a forked child's peak RSS would count this script's memory too.
        pid = os.posix_spawn(lab.tool('helm'), [lab.tool('helm')] + args, environment, file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, err.name, os.O_WRONLY, 0)])
        _, status, usage = os.wait4(pid, 0)
        wall = time.time() - started
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f'helm {" ".join(args[:2])} failed: {open(err.name).read()[-2000:]}')
    return {
        'wall': wall, 'cpu': usage.ru_utime + usage.ru_stime, 'rss_mib': usage.ru_maxrss / 1024,
        'api_cpu': lab.api_cpu() - api,
        'api_requests': lab.api_requests() - requests - 1,  # this scrape counts once
    }


def scenario(lab, sources, source, calls, extra=(), env=None, make_namespace=False, profiles=None, tag=None):
    """`calls` installs into new namespaces, then an upgrade of each; medians per step."""
    run = f'hp-{int(time.time())}'
    namespaces = [f'{run}-{i}' for i in range(calls)]
    if make_namespace:
        for ns in namespaces:
            lab.kube('create', 'namespace', ns)
    rows = collections.defaultdict(list)
    for step, replicas in (('install', '1'), ('upgrade', '2')):
        for i, ns in enumerate(namespaces):
            args = ['upgrade', '--install', '--reset-values', f'--namespace={ns}',
                    f'--kubeconfig={lab.dir}/kubeconfig', f'--kube-context={lab.cluster}', '--timeout=300s',
                    '--history-max=5', '--output=json', LABELS, f'--set=replicaCount={replicas}']
            if not make_namespace:
                args.insert(2, '--create-namespace')
            name = (tag or source).replace(' ', '_')
            profile = profiles and os.path.join(profiles, f'{name}.{step}.{i}.pprof')
            rows[step].append(measured(lab, args + list(extra) + sources.chart(source), env, profile))
    for ns in namespaces:
        subprocess.run([lab.tool('helm'), 'uninstall', 'app', f'--namespace={ns}', f'--kubeconfig={lab.dir}/kubeconfig',
                        f'--kube-context={lab.cluster}'], env=lab.env, capture_output=True)
        lab.kube('delete', 'namespace', ns, '--wait=false')
    return {step: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for step, rs in rows.items()}


def phases(files):
    """CPU seconds per phase over the profiles in `files`."""
    out = subprocess.run(['go', 'tool', 'pprof', '-traces'] + files, capture_output=True, text=True).stdout
    totals = collections.Counter()
    for block in out.split('-----------+-------------------------------------------------------')[1:]:
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        m = lines and re.match(r'([\d.]+)(ms|s)\s+(.*)', lines[0])
        if not m:
            continue
        seconds = float(m[1]) / (1000 if m[2] == 'ms' else 1)
        frames = [m[3]] + lines[1:]
        phase = next((name for name, pattern in PHASES if any(re.search(pattern, f) for f in frames)), 'other')
        totals[phase] += seconds
    return totals


def table(results):
    print(f'{"call":58} {"step":8} {"wall s":>7} {"CPU s":>7} {"RSS MiB":>8} {"API CPU s":>9} {"API req":>8}')
    for name, steps in results.items():
        for step, r in steps.items():
            print(f'{name:58} {step:8} {r["wall"]:7.3f} {r["cpu"]:7.3f} {r["rss_mib"]:8.1f} '
                  f'{r.get("api_cpu", 0):9.3f} {r.get("api_requests", 0):8.1f}')


def main():
    if sys.argv[1:2] == ['large-index']:
        return Sources.large_index(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('mode', choices=['sources', 'trim', 'phases'])
    parser.add_argument('--dir', default=os.environ.get('TENANCY_HUB_LAB_DIR', os.path.join(ROOT, '.lab')))
    parser.add_argument('--cluster', default='member-1')
    parser.add_argument('--calls', type=int, default=6)
    parser.add_argument('--json', help='also write the figures to this file')
    a = parser.parse_args()
    lab = Lab(a.dir, a.cluster)
    sources = Sources(lab)
    results = {}
    try:
        if a.mode == 'sources':
            results['helm version (process start only)'] = {
                '-': {k: statistics.median(r[k] for r in rows) for k in ('wall', 'cpu', 'rss_mib')}
                for rows in [[measured(lab, ['version']) for _ in range(a.calls)]]}
            for source in ('chart home', 'repository', 'repository, 10 MiB index', 'OCI', 'archive on disk'):
                print(f'[profile] {source}', file=sys.stderr)
                results[source] = scenario(lab, sources, source, a.calls)
        elif a.mode == 'trim':
            variants = [
                ('as before: --create-namespace, OpenAPI check', (), None, False),
                ('namespace made first', (), None, True),
                ('namespace made first, no OpenAPI check (trimmed)', TRIM, None, True),
                ('trimmed, GOMAXPROCS=1 (the operator\'s call)', TRIM, {'GOMAXPROCS': '1'}, True),
                ('trimmed, GOMAXPROCS=1 GOGC=400', TRIM, {'GOMAXPROCS': '1', 'GOGC': '400'}, True),
            ]
            for name, extra, env, make in variants:
                print(f'[profile] {name}', file=sys.stderr)
                results[name] = scenario(lab, sources, 'chart home', a.calls, extra, env, make)
            for source in ('repository', 'OCI', 'archive on disk'):
                results[f'the operator\'s call, {source}'] = scenario(
                    lab, sources, source, a.calls, TRIM, {'GOMAXPROCS': '1'}, True)
        else:
            profiles = tempfile.mkdtemp(prefix='helm-pprof-')
            for source in ('chart home', 'repository, 10 MiB index', 'OCI'):
                print(f'[profile] {source}', file=sys.stderr)
                scenario(lab, sources, source, a.calls, profiles=profiles)
            scenario(lab, sources, 'chart home', a.calls, TRIM, {'GOMAXPROCS': '1'}, True, profiles, 'trimmed')
            for label in ('chart home', 'repository, 10 MiB index', 'OCI', 'trimmed'):
                group = sorted(glob.glob(os.path.join(profiles, f'{label.replace(" ", "_")}.*.pprof')))
                name = "chart home, the operator's trimmed call" if label == 'trimmed' else label
                totals = phases(group)
                results[name] = {k: v / len(group) for k, v in totals.most_common()}
                print(f'## {name}: {len(group)} calls, {sum(totals.values()) / len(group) * 1000:.0f} ms of profiled CPU per call')
                for phase, seconds in totals.most_common():
                    print(f'  {seconds / len(group) * 1000:7.1f} ms  {100 * seconds / sum(totals.values()):5.1f} %  {phase}')
            shutil.rmtree(profiles, ignore_errors=True)
    finally:
        sources.stop()
    if a.mode != 'phases':
        table(results)
    if a.json:
        json.dump(results, open(a.json, 'w'), indent=1)


if __name__ == '__main__':
    main()
