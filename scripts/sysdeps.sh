#!/usr/bin/env bash
# Installs the system packages the tests need when they are missing: Java 17 (Spark), kcat and
# rsyslog with omkafka (compatibility tests), headless Chromium with its chromedriver (the console's
# browser tests). Idempotent; runs apt-get update at most once per call.
set -euo pipefail

need=()
java_ok() {
    command -v java >/dev/null 2>&1 || return 1
    local v
    v=$(java -version 2>&1 | head -1 | sed -E 's/.*version "([0-9]+).*/\1/')
    [ "${v:-0}" -ge 17 ] 2>/dev/null
}
java_ok || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v rsyslogd >/dev/null 2>&1 || need+=(rsyslog)
compgen -G "/usr/lib/*/rsyslog/omkafka.so" >/dev/null || compgen -G "/usr/lib/rsyslog/omkafka.so" >/dev/null \
    || need+=(rsyslog-kafka)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)

if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "sysdeps: missing ${need[*]}; install them (needs root): apt-get install -y ${need[*]}" >&2
    exit 0
fi
echo "sysdeps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
