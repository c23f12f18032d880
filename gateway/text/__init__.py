"""The text frontend: what a request's text sounds like, and where it is cut.

The public API, for every route that speaks text (REST `/v1/audio/speech`,
`/v1/realtime`, the vendor-compatible routes):

- `TextOptions(normalize, code, emoji, language)`, and `parse_options(data, defaults,
  prefix)` to read a request's `normalize` / `code` / `emoji` fields over the server's;
- `prepare(text, options, first_chars) -> list[Item]`: a whole input as speakable
  segments (`str`) and pauses (`Pause(ms)`), the first segment cut short for a fast
  first chunk; raises InvalidInput for an unreadable SSML break;
- `TextStream(options, first_chars)`: the same for text that arrives in pieces:
  `append(piece)`, `release()` (after a pause in the input), `flush()`, `restart()`,
  `pending_chars`; pieces give exactly what the whole text gives;
- `check_input(text, max_chars, field)`: type, length and "something to say" checks;
  `check_spoken(items, text, options, field)`: "something to say" in what the options
  made of the text (`prepare`'s items), for the routes that read it with options, and
  `says_something(text, options)`, the same as a yes or no;
- `model_language(family, path)`: the language a model speaks.

Modules: `markup` (markdown, SSML), `links` (URLs, e-mail), `numerals` (numbers, dates,
times, phone numbers, decades, and the order of the number passes), `quantities` (money,
percentages, units, durations, fractions, ratios, `100k`), `number_words` (a number's
words), `symbols` (emoji, `C#` and `C++`, `&` and `/` between words, markup characters), `normalize`
(the passes in order), `segments` (sentences per language), `stream` (incremental
cutting; `nesting`: the code spans, links and tags open where it would cut), `language`, `options`.
"""

from gateway.text.language import model_language
from gateway.text.normalize import Item, Pause, join_pauses, normalize_text
from gateway.text.options import CODE_MODES, EMOJI_MODES, TEXT_FIELDS, TextOptions, parse_options
from gateway.text.segments import check_input, check_spoken, clean, is_speakable, split_segments, unspoken
from gateway.text.stream import MIN_FIRST_CHARS, TextStream, prepare, says_something

__all__ = [
    "CODE_MODES", "EMOJI_MODES", "MIN_FIRST_CHARS", "TEXT_FIELDS", "Item", "Pause", "TextOptions", "TextStream",
    "check_input", "check_spoken", "clean", "is_speakable", "join_pauses", "model_language", "normalize_text",
    "parse_options", "prepare", "says_something", "split_segments", "unspoken",
]
