"""URLs and e-mail addresses, read as a person reads them aloud.

A person says "example dot com slash docs", not "h t t p s colon slash slash": the
scheme, `www.`, the port, the query and the fragment are left out; the host is read
label by label; a path is read when it is short and made of words (at most
`MAX_PATH_SEGMENTS` segments of at most `MAX_SEGMENT_CHARS` letters, digits, `-`, `_`),
else only the host is. An e-mail address is read "name dot surname at example dot com".
"""

from __future__ import annotations

import re

from gateway.text import language

MAX_PATH_SEGMENTS = 2
MAX_SEGMENT_CHARS = 24
# The three words a URL needs, per language (CLDR has no such names); English elsewhere.
_WORDS = {
    "en": ("dot", "slash", "at"), "de": ("Punkt", "Schrägstrich", "at"), "fr": ("point", "slash", "arobase"),
    "es": ("punto", "barra", "arroba"), "it": ("punto", "barra", "chiocciola"), "pt": ("ponto", "barra", "arroba"),
    "nl": ("punt", "slash", "apenstaartje"), "pl": ("kropka", "ukośnik", "małpa"), "sv": ("punkt", "snedstreck", "snabel-a"),
    "da": ("punktum", "skråstreg", "snabel-a"), "no": ("punktum", "skråstrek", "krøllalfa"),
    "fi": ("piste", "kauttaviiva", "ät"), "ru": ("точка", "слэш", "собака"), "uk": ("крапка", "слеш", "равлик"),
    "cs": ("tečka", "lomítko", "zavináč"), "tr": ("nokta", "eğik çizgi", "et"),
}
# The TLDs a bare domain ("see example.com") is recognised by; with a scheme or www. any host is.
_TLDS = ("com|org|net|io|dev|ai|app|co|edu|gov|info|me|tv|uk|us|de|fr|es|it|nl|eu|ca|au|jp|cn|in|ru|ch|se|"
         "no|dk|fi|pl|br|ly|gg|sh|so|xyz|tech|cloud|page|site|blog")
_TRAIL = ".,;:!?'\")]}"
URL = re.compile(
    r"(?<![\w@/.])(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]+"
    rf"|(?<![\w@/.-])(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+(?:{_TLDS})(?:/[^\s<>\"'`]*)?(?![\w@-])",
    re.IGNORECASE)
EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?![\w-])")
_WORDISH = re.compile(r"^[A-Za-z0-9_-]+$")


def words(lang: str) -> tuple[str, str, str]:
    """(dot, slash, at) in `lang`."""
    return _WORDS.get(language.base(lang), _WORDS["en"])


def _label(text: str) -> str:
    return re.sub(r"[-_]+", " ", text).strip()


def _host(host: str, dot: str) -> str:
    host = host.lower().split("@")[-1].split(":")[0]
    if host.startswith("www."):
        host = host[4:]
    return f" {dot} ".join(_label(part) for part in host.split(".") if part)


def speak_url(url: str, lang: str) -> str:
    """`https://www.example.com/docs/start?x=1` -> `example dot com slash docs slash start`."""
    dot, slash, _ = words(lang)
    rest = re.sub(r"^(?:[a-z]+://)", "", url, flags=re.IGNORECASE)
    host, _, path = rest.partition("/")
    path = re.split(r"[?#]", path, maxsplit=1)[0].strip("/")
    spoken = _host(host, dot)
    segments = [s for s in path.split("/") if s]
    if segments and len(segments) <= MAX_PATH_SEGMENTS and all(
            len(s) <= MAX_SEGMENT_CHARS and _WORDISH.match(s) for s in segments):
        spoken += "".join(f" {slash} {_label(s)}" for s in segments)
    return spoken


def speak_email(address: str, lang: str) -> str:
    """`jane.doe@example.com` -> `jane dot doe at example dot com`."""
    dot, _, at = words(lang)
    local, _, domain = address.partition("@")
    local_words = f" {dot} ".join(_label(part) for part in local.split(".") if part).replace("+", " plus ")
    return f"{local_words} {at} {_host(domain, dot)}"


def expand(text: str, lang: str) -> str:
    """Every e-mail address and URL in `text`, spelled out for speech."""
    text = EMAIL.sub(lambda m: f" {speak_email(m.group(0), lang)} ", text)

    def url(match: re.Match[str]) -> str:
        found = match.group(0)
        trail = ""
        while found and found[-1] in _TRAIL:  # "see example.com." -> the period ends the sentence
            found, trail = found[:-1], found[-1] + trail
        return f" {speak_url(found, lang)}{trail} " if found else match.group(0)

    return URL.sub(url, text)
