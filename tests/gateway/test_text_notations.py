"""Text frontend notations: what numbers, money, units, dates and symbols are read as (docs/text.md)."""

from __future__ import annotations

import random

import pytest

from gateway.text import TextOptions, TextStream, normalize_text, prepare

EN = TextOptions()


def spoken(text: str, lang: str = "en_US") -> str:
    """What `text` is read as (the segments joined)."""
    return " ".join(str(item) for item in normalize_text(text, TextOptions(language=lang)))


@pytest.mark.parametrize(("text", "expected"), [
    ("Call 555-123-4567 today.", "Call five five five, one two three, four five six seven today."),
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    ("+1 555 123 4567", "plus one, five five five, one two three, four five six seven"),
    ("Dial 1-800-555-1234.", "Dial one, eight zero zero, five five five, one two three four."),
    ("+44 20 7946 0958", "plus four four, two zero, seven nine four six, zero nine five eight"),
    ("Call me at 555-1234.", "Call me at five five five, one two three four."),
    ("from 500-1000 people", "from five hundred to one thousand people"),  # a round range
    # Found by a new-user trial: read as ranges, and service numbers and codes as amounts.
    ("Our office number is 555-1234.", "Our office number is five five five, one two three four."),
    ("Reach the desk at 555-1234 anytime.", "Reach the desk at five five five, one two three four anytime."),
    ("It took 200-300 ms.", "It took two hundred to three hundred milliseconds."),
    ("Call 911 or text 988.", "Call nine one one or text nine eight eight."),
    ("We sold 911 units.", "We sold nine hundred and eleven units."),  # no phone word
    ("Zip code 90210.", "Zip code nine zero two one zero."),
    ("My PIN is 4321, ext. 204.", "My PIN is four three two one, extension two zero four."),
    ("+3 points", "+ three points"),  # too few digits for a phone number
])
def test_phone_numbers_are_read_digit_by_digit_in_groups(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "expected"), [  # found by a new-user trial: pauses after "Dr.", "deck", "no"
    ("I met Dr. Smith and Mr. and Mrs. Jones.", "I met Doctor Smith and Mister and Missus Jones."),
    ("Gen Z loves Dr Pepper.", "Gen Z loves Doctor Pepper."),  # "Gen" without its full stop: no title
    ("Martin Luther King Jr. was born in 1929.", "Martin Luther King Junior was born in nineteen twenty-nine."),
    ("It happened on Dec. 5th. See you Sept. 1st!", "It happened on December fifth. See you September first!"),
    ("Hello there. No. 5 is the best, no. 6 is not.", "Hello there. Number five is the best, number six is not."),
    ("Go to 10 Main St. in town, then to St. Louis.", "Go to ten Main Street in town, then to St. Louis."),
    ("He lives on 5th Ave. Then he moved.", "He lives on fifth Avenue. Then he moved."),
    ("He is 5 ft. 10 in. tall and weighs 150 lbs. now.",
     "He is five feet ten inches tall and weighs one hundred and fifty pounds now."),
    ("See p. 45 or pp. 50-52.", "See page forty-five or pages fifty to fifty-two."),
    ("Apples vs. oranges, e.g. fruit, i.e. food, etc. Then more.",
     "Apples versus oranges, for example fruit, that is food, et cetera. Then more."),
    ("On March 5, 2024, Sept. 1 and Jan 1st.", "On March fifth, twenty twenty-four, September first and January first."),
    ("In March 2020 and March 5-7.", "In March twenty twenty and March five to seven."),  # found by a doc check
    ("Apple vs. Google, e.g. Python, i.e. Go, etc. Then more.",  # found by a doc check ("versus. Google")
     "Apple versus Google, for example Python, that is Go, et cetera. Then more."),
])
def test_english_abbreviations_are_read_as_their_words(text: str, expected: str) -> None:
    assert spoken(text) == expected
    assert len(prepare(text, EN, 0)) == len(prepare(expected, EN, 0))  # no sentence ends at them


@pytest.mark.parametrize(("text", "expected"), [  # found by a new-user trial
    ("Meet at 15:00, 18:30 or 00:30.", "Meet at fifteen hundred, eighteen thirty or twelve thirty AM."),
    ("Scores of 0.5, .5 and 0.05.", "Scores of zero point five, point five and zero point zero five."),
    ("If 1 <= 2 and x < 10 and y > 5, then a != b.",
     "If one less than or equal to two and x less than ten and y greater than five, then a not equal to b."),
    ("AT&T, R&D and Tom & Jerry.", "A T and T, R and D and Tom and Jerry."),
    ("There are 2^32 values.", "There are two to the power of thirty-two values."),
    ("It costs $5/mo or $0.02/GB, at 10 req/s.",
     "It costs five dollars per month or two cents per gigabyte, at ten req per second."),
    ("It costs $5/month, $10-20/month or €8 / year; night/day.",  # found by a doc check ("five dollars /month")
     "It costs five dollars per month, ten to twenty dollars per month or eight euro per year; night day."),
    ("Louis XIV met Henry VIII after World War II.", "Louis the fourteenth met Henry the eighth after World War two."),
    ("Malcolm X in Washington DC, and I went.", "Malcolm X in Washington DC, and I went."),  # not numerals
])
def test_clock_times_bare_decimals_comparisons_initials_and_powers(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "expected"), [  # found by a new-user trial: "221 billion Baker St."
    ("I live at 221B Baker St.", "I live at two hundred and twenty-one B Baker Street."),
    ("Apt 4B, seat 12B and room 3M.", "Apt four B, seat twelve B and room three M."),
    ("3B users, 2.5M downloads, 100k views", "three billion users, two point five million downloads, one hundred "
                                             "thousand views"),
])
def test_a_letter_after_a_number_is_a_scale_only_where_it_reads_as_one(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("the 1990s", "the nineteen nineties"),
    ("the 1900s and the 2000s", "the nineteen hundreds and the two thousands"),
    ("the '80s", "the eighties"),
    ("80s music", "eighties music"),
    ("in her 30s, mid-70s or the ’60s", "in her thirties, mid seventies or the sixties"),
    ("the 1980's", "the nineteen eighties"),
    ("retry every 30s", "retry every thirty seconds"),  # seconds, not a decade
    ("wait 30s", "wait thirty seconds"),
    ("the 10s", "the ten seconds"),  # "tens" only as '10s
    ("100s of people, 1,000s of files", "hundreds of people, thousands of files"),
    ("it took 100s", "it took one hundred seconds"),
])
def test_decades_are_read_as_decades(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("1/2", "one half"),
    ("3/4", "three quarters"),
    ("2/3 of them", "two thirds of them"),
    ("1/8, 7/10, 3/100", "one eighth, seven tenths, three hundredths"),
    ("2 1/2 cups", "two and a half cups"),
    ("3/4 mi and 1 1/2 km", "three quarters of a mile and one and a half kilometers"),
    ("10/10", "ten out of ten"),
    ("open 24/7, 50/50", "open twenty-four seven, fifty fifty"),
    ("12/25/2024", "December twenty-fifth, twenty twenty-four"),  # a date, not a fraction
    ("and/or", "and or"),
    ("he/she w/o TCP/IP", "he or she without TCP IP"),
    ("src/main/app.py", "src/main/app.py"),  # a path is left as written
    ("speed in km/h, 50 km/h", "speed in kilometers per hour, fifty kilometers per hour"),
])
def test_fractions_and_slashes_read_as_said(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("2h 30m", "two hours thirty minutes"),
    ("1m 45s", "one minute forty-five seconds"),
    ("took 1h30m15s", "took one hour thirty minutes fifteen seconds"),
    ("3d 4h", "three days four hours"),
    ("2h", "two hours"),  # one part keeps its own reading
    ("30m", "thirty meters"),
    ("45s", "forty-five seconds"),  # a number right before "s" is seconds
    ("5s", "five seconds"),
    ("It took 45s and 5s.", "It took forty-five seconds and five seconds."),
    ("1s, 1.5s, 5-10s", "one second, one point five seconds, five to ten seconds"),
])
def test_durations_of_two_parts_or_more_are_read_as_durations(text: str, expected: str) -> None:
    assert spoken(text) == expected


def test_seconds_are_read_in_every_language() -> None:
    assert spoken("Warte 45s, nicht -5s oder 1,5s.", "de_DE") == (
        "Warte fünfundvierzig Sekunden, nicht minus fünf Sekunden oder eins Komma fünf Sekunden.")


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("$0.99", "en_US", "ninety-nine cents"),
    ("$0.01", "en_US", "one cent"),
    ("$1.05", "en_US", "one dollar, five cents"),
    ("$1", "en_US", "one dollar"),
    ("$1,000,000", "en_US", "one million dollars"),
    ("€5", "en_US", "five euro"),
    ("0,99 €", "de_DE", "neunundneunzig Cent"),
])
def test_money_under_one_is_its_cents(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("a 3:1 ratio", "a three to one ratio"),
    ("16:9 and 1:50,000", "sixteen to nine and one to fifty thousand"),
    ("3:15", "three fifteen"),
    ("10:30 pm", "ten thirty PM"),
    ("25:99", "twenty-five ninety-nine"),  # neither a ratio nor a time: its numbers, as "24/7"
    ("25:05", "twenty-five zero five"),
])
def test_ratios_are_read_where_the_right_side_cannot_be_minutes(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("100k", "en_US", "one hundred thousand"),
    ("2.5M users", "en_US", "two point five million users"),
    ("$3B", "en_US", "three billion dollars"),
    ("1.5bn", "en_US", "one point five billion"),
    ("a 4K screen, 5 MB", "en_US", "a four K screen, five megabytes"),
    ("2,5M", "de_DE", "zwei Millionen fünfhunderttausend"),
])
def test_scaled_numbers_are_read_with_their_scale(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("It was -5°C.", "en_US", "It was minus five degrees Celsius."),
    ("Change: -3.5%", "en_US", "Change: minus three point five percent"),
    ("The balance is -$20.", "en_US", "The balance is minus twenty dollars."),
    ("−1°C, -20 €, -5 EUR, -100k", "en_US", "minus one degree Celsius, minus twenty euro, minus five euro, "
                                            "minus one hundred thousand"),
    ("-10 degrees, -5", "en_US", "minus ten degrees, minus five"),
    ("Es hat -5 °C, -20 €.", "de_DE", "Es hat minus fünf Grad Celsius, minus zwanzig Euro."),
    ("-3,5 %", "fr_FR", "moins trois virgule cinq pour cent"),
    ("-5 °C, -5", "pl", "minus pięć stopni Celsjusza, minus pięć"),  # num2words: a word, no negative numbers
    ("-5°C", "ja", "摂氏 マイナス 五 度"),  # the minus goes where the number is
])
def test_a_minus_sign_is_read_before_a_unit_currency_or_percent(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("5-10%", "five to ten percent"),
    ("5-10 km, 10-20k users", "five to ten kilometers, ten to twenty thousand users"),
    ("$5-10, €10–€20", "five to ten dollars, ten to twenty euro"),
    ("$1.50-$2, 2.50-3 €", "one dollar, fifty cents to two dollars, two euro, fifty cents to three euro"),
    ("$5-10M", "five to ten million dollars"),
    ("10-20", "ten to twenty"),
])
def test_a_range_takes_the_quantity_on_its_right(text: str, expected: str) -> None:
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("$3.50", "de_DE", "drei Dollar und fünfzig Cent"),
    ("€3.50", "de_DE", "drei Euro und fünfzig Cent"),  # as "3,50 €" is
    ("$1,000.50", "de_DE", "eintausend Dollar und fünfzig Cent"),
    ("1.500 €", "de_DE", "eintausendfünfhundert Euro"),  # three digits: the German group mark
    ("$3.50", "fr_FR", "trois dollars et cinquante cents"),
    ("€3.50", "fr_FR", "trois euros et cinquante centimes"),
    ("3,50 €", "en_US", "three euro, fifty cents"),
    ("$3.500", "es_ES", "tres mil quinientos dólares"),
])
def test_money_in_the_other_notation_is_read_in_the_voice_language(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("v2.0.1", "en_US", "v two point zero point one"),
    ("Upgrade to V10.2.33.", "en_US", "Upgrade to V ten point two point thirty-three."),
    ("version 2.0.1", "en_US", "version two point zero point one"),
    ("v2.0.1", "de_DE", "v zwei Punkt null Punkt eins"),
    ("Version 2.10 is out.", "en_US", "Version two point ten is out."),  # found by a new-user trial
    ("Update v2.0 now.", "en_US", "Update v two point zero now."),
    ("It was 2.10 m.", "en_US", "It was two point one zero meters."),  # a decimal, its zero as written
])
def test_a_version_after_v_is_read_as_a_version(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("Es hat 1.234.567 Einwohner.", "de_DE",
     "Es hat eine Million zweihundertvierunddreißigtausendfünfhundertsiebenundsechzig Einwohner."),
    ("Hay 1.000.000 de euros.", "es_ES", "Hay un millón de euros."),
    ("Version 1.2.3 und v1.000.000.", "de_DE", "Version eins Punkt zwei Punkt drei und v eins Punkt null Punkt null."),
    ("Node 1.000.000", "en_US", "Node one point zero point zero"),  # "." groups no English number
])
def test_thousands_grouped_by_points_are_a_number_where_the_point_is_the_group_mark(
        text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected  # found by a doc check: "1.234.567" was read as a version


@pytest.mark.parametrize(("text", "lang", "expected"), [
    ("C++ and C#.", "en_US", "C plus plus and C sharp."),
    ("F#, C++20 and C#7", "en_US", "F sharp, C plus plus twenty and C sharp seven"),
    ("a sonata in C# minor, then G#", "en_US", "a sonata in C sharp minor, then G sharp"),
    ("C++ y C#", "es_ES", "C más más y C sharp"),  # "+" as a phone number's
    ("C# und F#", "de_DE", "C sharp und F sharp"),
])
def test_sharp_and_plus_plus_names_are_read(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize("text", [
    "Call +1 (555) 123-4567 or call 555-1234 about the '80s, 1/2 and 2 1/2 km/h and/or 2h 30m "
    "for $0.99, a 3:1 ratio, 100k users and 2.5M. Then 10:30 pm.",
    "It was -5°C, prices rose 5-10% to $5-$10 or -$20 for C# and C++ v2.0.1 in 45s. Then 25:99 and 3,50 €.",
    'Your code is <spell>AB12</spell>, or <say-as interpret-as="characters">x9</say-as>. From 1990-1995 it was 2x.',
])
def test_the_new_notations_read_the_same_in_pieces(text: str) -> None:
    whole = prepare(text, EN)
    for seed in range(10):
        rng = random.Random(seed)
        stream = TextStream(EN)
        out: list[object] = []
        at = 0
        while at < len(text):
            size = rng.randint(1, 9)
            out += stream.append(text[at:at + size])
            at += size
        out += stream.flush()
        assert out == whole


@pytest.mark.parametrize(("text", "expected"), [
    ("We have 1,250,000 users now.", "We have one million two hundred and fifty thousand users now."),
    ("It costs $1,234.56.", "It costs one thousand two hundred and thirty-four dollars, fifty-six cents."),
    ("The 1,234,567th visitor.", "The one million two hundred and thirty-four thousand five hundred and "
                                 "sixty-seventh visitor."),
    ("He came 1st,2nd,3rd.", "He came first, second, third."),
])
def test_a_number_is_read_without_commas_inside_it(text: str, expected: str) -> None:
    """num2words' "one million, two hundred ..." made a streamed first clause end inside the
    number (a pause after "million,"), and "1,234,567th" was read as "one thousand ..., ... seventh"."""
    assert spoken(text) == expected


@pytest.mark.parametrize(("text", "expected"), [  # found by a new-user trial: "one,2,3"
    ("Pick 1,2 or 3.", "Pick one, two or three."),
    ("1,2,3", "one, two, three"),
    ("Scores were 3,4,5 and 10,000, or so.", "Scores were three, four, five and ten thousand, or so."),
    ("Pick 1,2, or 3.", "Pick one, two, or three."),
    ("Rows 007,8", "Rows zero zero seven, eight"),
])
def test_numbers_joined_by_commas_that_do_not_group_thousands_are_a_list(text: str, expected: str) -> None:
    """Only the first was read ("one,2,3"): the number pass does not start right after a comma, so
    that "1,000" stays one number; a speech LM reads what is left as digits or not at all."""
    assert spoken(text) == expected


def test_a_streamed_first_clause_does_not_end_inside_a_number() -> None:
    stream = TextStream(EN, 24, 12, field="text")  # /v1/realtime's first clause
    segments = [*stream.append("We have 1,250,000 users now, and more."), *stream.flush()]
    assert segments[0].startswith("We have one million two hundred and fifty thousand")


@pytest.mark.parametrize(("text", "lang", "expected"), [  # found by a new-user trial
    ("From 1990-1995 and 1939–1945.", "en_US", "From nineteen ninety to nineteen ninety-five and nineteen thirty-nine to"
     " nineteen forty-five."),
    ("In 1990-95 it rose; pages 10-20 and 2020-2001.", "en_US",
     "In nineteen ninety to ninety-five it rose; pages ten to twenty and two thousand and twenty to two thousand and one."),
    ("Version 2.0 costs 2.0 and 3.50 kg.", "en_US", "Version two point zero costs two point zero and three point five zero"
     " kilograms."),
    ("Es kostet 2,50 und 2,0.", "de_DE", "Es kostet zwei Komma fünf null und zwei Komma null."),
    ("Costa 2,5.", "it_IT", "Costa due virgola cinque."),  # num2words' Italian drops a Decimal's decimals
    ("2,5M", "de_DE", "zwei Millionen fünfhunderttausend"),  # a scaled whole number gains no "Komma null"
    ("It is 2x faster, 1.5x cheaper and 10× bigger.", "en_US",
     "It is two times faster, one point five times cheaper and ten times bigger."),
    ("A 2x4 board, 1920x1080 and 800x600 in 1080p or 4320p.", "en_US",
     "A two by four board, nineteen twenty by ten eighty and eight hundred by six hundred in ten eighty p or forty-three"
     " twenty p."),
    ("Meet at 9 a.m., then at 5 p.m.; or 10:30 a.m.: fine.", "en_US",
     "Meet at nine AM, then at five PM; or ten thirty AM: fine."),
    ("He is 5'10\" tall, she 6’2”.", "en_US", "He is five feet ten inches tall, she six feet two inches."),
    ("Coffee w/ milk, W/o sugar.", "en_US", "Coffee with milk, Without sugar."),
    # found by a doc check: a dash between times was read as written, a number before "-word" kept a space
    ("Open 9am-5pm, or 9:00-17:00, or 2-3pm; pages 5-10.", "en_US",
     "Open nine AM to five PM, or nine o'clock to seventeen hundred, or two to three PM; pages five to ten."),
    ("A 3-day trip, a 5-year-old, the 3rd-place team.", "en_US", "A three-day trip, a five-year-old, the third-place team."),
])
def test_year_ranges_decimal_zeros_multiples_sizes_and_marks(text: str, lang: str, expected: str) -> None:
    assert spoken(text, lang) == expected


@pytest.mark.parametrize(("text", "expected"), [  # found by a new-user trial: Cartesia's <spell> read "AB twelve"
    ("Your code is <spell>AB12</spell> now.", "Your code is A B one two now."),
    ('Say <say-as interpret-as="characters">ok-7</say-as>.', "Say O K seven."),
    ('Say <say-as interpret-as="date">2024</say-as>.', "Say twenty twenty-four."),  # not a spelling: its text
    ('<emotion value="happy"/>Hi <speed ratio="1.2"/>there.', "Hi there."),
])
def test_spelled_text_is_read_character_by_character(text: str, expected: str) -> None:
    assert spoken(text) == expected
