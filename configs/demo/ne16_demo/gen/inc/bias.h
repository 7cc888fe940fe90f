#ifndef __BIAS_H__
#define __BIAS_H__

#include <pmsis.h>

#endif
