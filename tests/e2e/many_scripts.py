"""A text mixing many scripts, digits, spaces and punctuation (valid UTF-8), for the tokenizer's
test and benchmark."""
import random


def many_scripts(seed, pieces):
    """A text mixing scripts, digits, spaces and punctuation, valid UTF-8."""
    r = random.Random(seed)
    ranges = [(0x20, 0x7e)] * 3 + [(0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x5d0, 0x5ea), (0x620, 0x64a),
                                   (0x660, 0x669), (0x900, 0x97f), (0xe01, 0xe3a), (0x2000, 0x206f), (0x2150, 0x218f),
                                   (0x2460, 0x24ff), (0x3000, 0x303f), (0x3041, 0x30ff), (0x4e00, 0x4fff),
                                   (0xac00, 0xacff), (0x1f300, 0x1f64f), (0xff01, 0xff5e), (0x1d400, 0x1d454)]
    spaces = [" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "   \n  "]
    words = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "''", " 's", "123", "٣٤٥", "Ⅻ", "½", "x²", "café",
             "naïve", "日本語", "🎉", "👍🏽", "e\u0301", "\n%\n"]
    out = []
    for _ in range(pieces):
        k = r.random()
        if k < 0.3:
            out.append(r.choice(spaces))
        elif k < 0.5:
            out.append(r.choice(words))
        else:
            lo, hi = r.choice(ranges)
            out.append("".join(chr(r.randint(lo, hi)) for _ in range(r.randint(1, 8))))
    return "".join(out)
