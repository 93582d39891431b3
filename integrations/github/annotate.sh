# Sourced by setup.sh and run.sh: workflow-command output for GitHub Actions.

# gh_escape prints $1 escaped as workflow-command data (%, CR and LF).
gh_escape() {
  local s="$1"
  s="${s//'%'/%25}"
  s="${s//$'\r'/%0D}"
  s="${s//$'\n'/%0A}"
  printf '%s' "$s"
}

# annotate LEVEL TITLE MESSAGE prints a ::LEVEL:: annotation (error, warning).
annotate() { printf '::%s title=%s::%s\n' "$1" "$2" "$(gh_escape "$3")"; }
